#include "fabric/levels.h"

#include <cstdlib>

#include <fmt/format.h>

namespace gpool::fabric {
namespace {

constexpr uint32_t kNoLevelIndex = UINT32_MAX;

// The switch-to-switch graph over every cabled link, in dense switch indices.
struct LevelGraph {
  std::vector<uint32_t> off{0};
  std::vector<uint32_t> peer;
  std::vector<uint8_t> has_ca;

  explicit LevelGraph(const Fabric& f) {
    const auto& sw = f.switches();
    std::vector<uint32_t> index(f.num_nodes(), kNoLevelIndex);
    for (uint32_t i = 0; i < sw.size(); ++i) index[sw[i].value()] = i;
    has_ca.assign(sw.size(), 0);
    off.reserve(sw.size() + 1);
    for (uint32_t i = 0; i < sw.size(); ++i) {
      for (const Adjacent* a = f.adj_begin(sw[i]); a != f.adj_end(sw[i]); ++a) {
        NodeType t = f.node(a->peer).type;
        if (t == NodeType::kSwitch)
          peer.push_back(index[a->peer.value()]);
        else if (t == NodeType::kCa)
          has_ca[i] = 1;
      }
      off.push_back(static_cast<uint32_t>(peer.size()));
    }
  }
  size_t size() const { return has_ca.size(); }
  const uint32_t* begin(uint32_t s) const { return peer.data() + off[s]; }
  const uint32_t* end(uint32_t s) const { return peer.data() + off[s + 1]; }
};

// Breadth-first hop counts from `sources` within one component. `dist` must hold -1 for every
// member of the component; `queue` is scratch.
void LevelBfs(const LevelGraph& g, const std::vector<uint32_t>& sources, std::vector<int32_t>* dist,
              std::vector<uint32_t>* queue) {
  queue->clear();
  for (uint32_t s : sources) {
    if ((*dist)[s] >= 0) continue;
    (*dist)[s] = 0;
    queue->push_back(s);
  }
  for (size_t h = 0; h < queue->size(); ++h) {
    uint32_t s = (*queue)[h];
    for (const uint32_t* p = g.begin(s); p != g.end(s); ++p)
      if ((*dist)[*p] < 0) {
        (*dist)[*p] = (*dist)[s] + 1;
        queue->push_back(*p);
      }
  }
}

// The member of `comp` farthest from the last BFS (lowest index on ties).
uint32_t LevelFarthest(const std::vector<uint32_t>& comp, const std::vector<int32_t>& dist) {
  uint32_t best = comp.front();
  for (uint32_t s : comp)
    if (dist[s] > dist[best] || (dist[s] == dist[best] && s < best)) best = s;
  return best;
}

struct LevelScratch {
  std::vector<int32_t> a, b, c;
  std::vector<uint32_t> queue, sources;
  void Reset(const std::vector<uint32_t>& comp) {
    for (uint32_t s : comp) a[s] = b[s] = c[s] = -1;
  }
};

// Levels of one component "from the top" (see levels.h). Returns false when the double sweep
// does not give a tree layering; otherwise fills `level` and counts the switches without CAs it
// put on level 0 and those it moved up because they join several pods.
bool LevelsFromTop(const LevelGraph& g, const std::vector<uint32_t>& comp, uint32_t first_ca,
                   LevelScratch* sc, std::vector<int32_t>* level, size_t* empty_leaves,
                   size_t* promoted) {
  std::vector<int32_t>& dv = sc->a;
  std::vector<int32_t>& dw = sc->b;
  std::vector<int32_t>& dm = sc->c;
  sc->Reset(comp);
  LevelBfs(g, {first_ca}, &dv, &sc->queue);
  const uint32_t v = LevelFarthest(comp, dv);
  for (uint32_t s : comp) dv[s] = -1;  // reused for the sweep from v
  LevelBfs(g, {v}, &dv, &sc->queue);
  const uint32_t w = LevelFarthest(comp, dv);
  LevelBfs(g, {w}, &dw, &sc->queue);
  const int32_t d = dv[w];
  if (d < 2 || d % 2 != 0) return false;
  const int32_t top = d / 2;
  sc->sources.clear();
  for (uint32_t s : comp)
    if (dv[s] == top && dw[s] == top) sc->sources.push_back(s);
  LevelBfs(g, sc->sources, &dm, &sc->queue);
  for (uint32_t s : comp) {
    if (dm[s] > top || (g.has_ca[s] && dm[s] != top)) return false;
    for (const uint32_t* p = g.begin(s); p != g.end(s); ++p)
      if (std::abs(dm[s] - dm[*p]) != 1) return false;
  }
  for (uint32_t s : comp) (*level)[s] = top - dm[s];

  // A top switch missing cables towards v or w is not midway between them and lands on level 0
  // like a leaf without hosts. Told apart by the pods: a leaf's neighbours all belong to one pod
  // (switches below the top joined through CA-facing leaves), a top switch's to several. Leaves
  // of pods without any host are not tested: their pod has no CA-facing leaf to join it, and a
  // top switch is within `top` hops of the hosts, which they are not.
  std::vector<int32_t>& pod = dv;  // reused: v's distances are no longer needed
  for (uint32_t s : comp) pod[s] = -1;
  auto in_pod_graph = [&](uint32_t s) {
    int32_t lv = (*level)[s];
    return lv > 0 ? lv < top : g.has_ca[s] != 0;
  };
  int32_t pods = 0;
  for (uint32_t s : comp) {
    if (!in_pod_graph(s) || pod[s] >= 0) continue;
    pod[s] = pods;
    sc->queue.assign(1, s);
    for (size_t h = 0; h < sc->queue.size(); ++h)
      for (const uint32_t* p = g.begin(sc->queue[h]); p != g.end(sc->queue[h]); ++p)
        if (in_pod_graph(*p) && pod[*p] < 0) {
          pod[*p] = pods;
          sc->queue.push_back(*p);
        }
    ++pods;
  }
  // Hop distance from the CA-facing switches, to recognise leaves of pods without hosts.
  std::vector<int32_t>& dl = dw;
  for (uint32_t s : comp) dl[s] = -1;
  sc->sources.clear();
  for (uint32_t s : comp)
    if (g.has_ca[s]) sc->sources.push_back(s);
  LevelBfs(g, sc->sources, &dl, &sc->queue);
  for (uint32_t s : comp) {
    if ((*level)[s] != 0 || g.has_ca[s]) continue;
    ++*empty_leaves;
    if (top < 2 || dl[s] > top) continue;
    int32_t seen = -1;
    bool several = false;
    for (const uint32_t* p = g.begin(s); p != g.end(s) && !several; ++p) {
      int32_t q = pod[*p];
      if (q < 0) continue;
      several = seen >= 0 && q != seen;
      seen = q;
    }
    if (several) {
      (*level)[s] = 2;  // its neighbours are all on level 1
      --*empty_leaves;
      ++*promoted;
    }
  }
  return true;
}

}  // namespace

SwitchLevels ComputeSwitchLevels(const Fabric& f) {
  SwitchLevels r;
  r.level.assign(f.num_nodes(), -1);
  const auto& sw = f.switches();
  size_t with_level = 0;
  for (NodeId s : sw) with_level += f.node(s).level >= 0;
  if (!sw.empty() && with_level == sw.size()) {
    for (NodeId s : sw) r.level[s.value()] = f.node(s).level;
    return r;
  }
  r.inferred = true;
  if (with_level > 0)
    r.notes.push_back(fmt::format(
        "{} of {} switches carry a level; ignoring them and inferring all levels", with_level,
        sw.size()));

  const LevelGraph g(f);
  const uint32_t n = static_cast<uint32_t>(g.size());
  LevelScratch sc;
  sc.a.assign(n, -1);
  sc.b.assign(n, -1);
  sc.c.assign(n, -1);
  std::vector<int32_t> level(n, -1);
  std::vector<uint8_t> seen(n, 0);
  std::vector<uint32_t> comp;
  size_t unplaced = 0, empty_leaves = 0, promoted = 0;
  for (uint32_t start = 0; start < n; ++start) {
    if (seen[start]) continue;
    comp.assign(1, start);
    seen[start] = 1;
    for (size_t h = 0; h < comp.size(); ++h)
      for (const uint32_t* p = g.begin(comp[h]); p != g.end(comp[h]); ++p)
        if (!seen[*p]) {
          seen[*p] = 1;
          comp.push_back(*p);
        }
    uint32_t first_ca = kNoLevelIndex;
    for (uint32_t s : comp)
      if (g.has_ca[s] && s < first_ca) first_ca = s;
    if (first_ca == kNoLevelIndex) {
      unplaced += comp.size();
      continue;
    }
    if (LevelsFromTop(g, comp, first_ca, &sc, &level, &empty_leaves, &promoted)) continue;
    // From the leaves: hop distance from the nearest CA-facing switch.
    for (uint32_t s : comp) level[s] = -1;
    sc.sources.clear();
    for (uint32_t s : comp)
      if (g.has_ca[s]) sc.sources.push_back(s);
    LevelBfs(g, sc.sources, &level, &sc.queue);
  }
  for (uint32_t i = 0; i < n; ++i) r.level[sw[i].value()] = static_cast<int16_t>(level[i]);

  if (empty_leaves)
    r.notes.push_back(fmt::format(
        "{} switch{} without CAs placed on level 0 as leaves (levels inferred from the top tier: "
        "the switches midway between the two farthest-apart switches)",
        empty_leaves, empty_leaves == 1 ? "" : "es"));
  if (promoted)
    r.notes.push_back(fmt::format(
        "{} switch{} without CAs joining several pods placed on level 2 (top switches missing "
        "cables)",
        promoted, promoted == 1 ? "" : "es"));
  if (unplaced)
    r.notes.push_back(fmt::format(
        "{} switches are not connected to any leaf; they have no level and no pod", unplaced));
  return r;
}

}  // namespace gpool::fabric
