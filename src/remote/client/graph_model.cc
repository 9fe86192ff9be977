#include "remote/client/graph_model.h"

#include <algorithm>
#include <deque>

#include <fmt/format.h>

namespace gpool::remote::client::graph {

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kKernel: return "kernel";
    case Kind::kMemcpy: return "memcpy";
    case Kind::kMemset: return "memset";
    case Kind::kHost: return "host";
    case Kind::kEmpty: return "empty";
    case Kind::kEventRecord: return "event record";
    case Kind::kEventWait: return "event wait";
  }
  return "?";
}

Result Graph::Add(Op op, const std::vector<Node*>& deps, Node** out) {
  for (size_t i = 0; i < deps.size(); ++i) {
    if (!deps[i] || !Contains(deps[i])) {
      return {Err::kInvalidValue, fmt::format("dependency {} ({}) is not a node of this graph", i,
                                              static_cast<const void*>(deps[i]))};
    }
    if (std::find(deps.begin(), deps.begin() + i, deps[i]) != deps.begin() + i) {
      return {Err::kInvalidValue, fmt::format("dependency {} repeats an earlier one", i)};
    }
  }
  auto n = std::make_unique<Node>();
  n->op = std::move(op);
  n->deps = deps;
  Node* p = n.get();
  index_[p] = nodes_.size();
  nodes_.push_back(std::move(n));
  if (out) *out = p;
  return {};
}

Result Graph::AddEdge(Node* from, Node* to) {
  if (!from || !to || !Contains(from) || !Contains(to)) {
    return {Err::kInvalidValue, "an edge's end is not a node of this graph"};
  }
  if (from == to) return {Err::kInvalidValue, "an edge from a node to itself"};
  if (std::find(to->deps.begin(), to->deps.end(), from) != to->deps.end()) {
    return {Err::kInvalidValue, "the edge exists already"};
  }
  to->deps.push_back(from);
  return {};
}

Result Graph::RemoveEdge(Node* from, Node* to) {
  if (!from || !to || !Contains(from) || !Contains(to)) {
    return {Err::kInvalidValue, "an edge's end is not a node of this graph"};
  }
  auto it = std::find(to->deps.begin(), to->deps.end(), from);
  if (it == to->deps.end()) return {Err::kInvalidValue, "there is no such edge"};
  to->deps.erase(it);
  return {};
}

Result Graph::Remove(Node* n) {
  if (!n || !Contains(n)) return {Err::kInvalidValue, "not a node of this graph"};
  for (auto& other : nodes_) std::erase(other->deps, n);
  for (auto it = cloned_from_.begin(); it != cloned_from_.end();) {
    it = it->second == n ? cloned_from_.erase(it) : std::next(it);
  }
  nodes_.erase(nodes_.begin() + static_cast<std::ptrdiff_t>(index_.at(n)));
  Reindex();
  return {};
}

void Graph::Reindex() {
  index_.clear();
  for (size_t i = 0; i < nodes_.size(); ++i) index_[nodes_[i].get()] = i;
}

std::vector<Node*> Graph::Dependents(const Node* n) const {
  std::vector<Node*> out;
  for (const auto& other : nodes_) {
    if (std::find(other->deps.begin(), other->deps.end(), n) != other->deps.end()) {
      out.push_back(other.get());
    }
  }
  return out;
}

Node* Graph::InClone(const Node* original) const {
  auto it = cloned_from_.find(original);
  return it == cloned_from_.end() ? nullptr : it->second;
}

std::vector<Node*> Graph::Roots() const {
  std::vector<Node*> out;
  for (const auto& n : nodes_) {
    if (n->deps.empty()) out.push_back(n.get());
  }
  return out;
}

std::vector<std::pair<Node*, Node*>> Graph::Edges() const {
  std::vector<std::pair<Node*, Node*>> out;
  for (const auto& n : nodes_) {
    for (Node* d : n->deps) out.emplace_back(d, n.get());
  }
  return out;
}

std::unique_ptr<Graph> Graph::Clone(std::map<const Node*, Node*>* map) const {
  auto g = std::make_unique<Graph>();
  std::map<const Node*, Node*> local;
  std::map<const Node*, Node*>& m = map ? *map : local;
  for (const auto& n : nodes_) {
    auto c = std::make_unique<Node>();
    c->op = n->op;
    m[n.get()] = c.get();
    g->index_[c.get()] = g->nodes_.size();
    g->nodes_.push_back(std::move(c));
  }
  for (const auto& n : nodes_) {
    Node* c = m[n.get()];
    for (Node* d : n->deps) c->deps.push_back(m[d]);
  }
  for (const auto& n : nodes_) g->cloned_from_[n.get()] = m[n.get()];
  return g;
}

Result Graph::TopoOrder(std::vector<Node*>* out) const {
  // Kahn's algorithm over the nodes' insertion order.
  std::vector<size_t> waiting(nodes_.size());
  std::vector<std::vector<size_t>> dependents(nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    waiting[i] = nodes_[i]->deps.size();
    for (Node* d : nodes_[i]->deps) dependents[index_.at(d)].push_back(i);
  }
  std::deque<size_t> ready;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (waiting[i] == 0) ready.push_back(i);
  }
  out->clear();
  while (!ready.empty()) {
    size_t i = ready.front();
    ready.pop_front();
    out->push_back(nodes_[i].get());
    for (size_t j : dependents[i]) {
      if (--waiting[j] == 0) ready.push_back(j);
    }
  }
  if (out->size() != nodes_.size()) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (waiting[i] != 0) {
        return {Err::kCycle, fmt::format("the graph has a cycle through node {} ({} node, the "
                                         "{}th added)", static_cast<const void*>(nodes_[i].get()),
                                         KindName(nodes_[i]->op.kind), i + 1)};
      }
    }
  }
  return {};
}

Result Instantiate(const Graph& g, std::unique_ptr<Exec>* out) {
  auto e = std::make_unique<Exec>();
  e->graph = g.Clone(&e->from_original);
  if (Result r = e->graph->TopoOrder(&e->order); !r.ok()) return r;
  *out = std::move(e);
  return {};
}

Result UpdateExec(Exec* e, const Graph& g, UpdateFail* fail, const Node** why_node) {
  *fail = UpdateFail::kNone;
  *why_node = nullptr;
  const auto& to = e->graph->nodes();
  const auto& from = g.nodes();
  if (to.size() != from.size()) {
    *fail = UpdateFail::kTopology;
    return {Err::kInvalidValue, fmt::format("the graph has {} nodes, the executable graph {}",
                                            from.size(), to.size())};
  }
  std::map<const Node*, size_t> at;  // g's node -> its index
  for (size_t i = 0; i < from.size(); ++i) at[from[i].get()] = i;
  std::map<const Node*, size_t> exec_at;
  for (size_t i = 0; i < to.size(); ++i) exec_at[to[i].get()] = i;
  for (size_t i = 0; i < from.size(); ++i) {
    const Node& a = *from[i];
    const Node& b = *to[i];
    if (a.op.kind != b.op.kind) {
      *fail = UpdateFail::kNodeType;
      *why_node = &a;
      return {Err::kInvalidValue, fmt::format("node {} is a {} node, the executable graph's a {} "
                                              "node", i + 1, KindName(a.op.kind),
                                              KindName(b.op.kind))};
    }
    bool same = a.deps.size() == b.deps.size();
    for (size_t d = 0; same && d < a.deps.size(); ++d) {
      same = at.at(a.deps[d]) == exec_at.at(b.deps[d]);
    }
    if (!same) {
      *fail = UpdateFail::kTopology;
      *why_node = &a;
      return {Err::kInvalidValue, fmt::format("node {} has other dependencies than the executable "
                                              "graph's", i + 1)};
    }
  }
  e->from_original.clear();
  for (size_t i = 0; i < from.size(); ++i) {
    to[i]->op = from[i]->op;
    e->from_original[from[i].get()] = to[i].get();
  }
  return {};
}

// ---- capture

CaptureTable::~CaptureTable() {
  for (Capture* c : captures_) {
    if (c->owns_graph) delete c->graph;
    delete c;
  }
}

Result CaptureTable::Begin(const void* stream, Mode mode, uint64_t thread, Graph* into) {
  if (streams_.count(stream)) {
    return {Err::kIllegalState, "the stream is capturing already"};
  }
  auto* c = new Capture;
  c->id = next_id_++;
  c->graph = into ? into : new Graph;
  c->owns_graph = into == nullptr;
  c->mode = mode;
  c->thread = thread;
  c->origin = stream;
  c->streams.insert(stream);
  captures_.insert(c);
  streams_[stream] = {c, {}};
  return {};
}

Capture* CaptureTable::Of(const void* stream) const {
  auto it = streams_.find(stream);
  return it == streams_.end() ? nullptr : it->second.cap;
}

const std::vector<Node*>* CaptureTable::Deps(const void* stream) const {
  auto it = streams_.find(stream);
  return it == streams_.end() ? nullptr : &it->second.deps;
}

Result CaptureTable::Append(const void* stream, Op op, Node** out) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return {Err::kNotCapturing, "the stream is not capturing"};
  Capture* c = it->second.cap;
  if (c->invalid) {
    return {Err::kInvalidated, fmt::format("the stream's capture was invalidated ({})",
                                           c->invalid_why)};
  }
  Node* n;
  if (Result r = c->graph->Add(std::move(op), it->second.deps, &n); !r.ok()) return r;
  it->second.deps = {n};
  if (out) *out = n;
  return {};
}

Result CaptureTable::SetDeps(const void* stream, const std::vector<Node*>& deps, bool add) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return {Err::kIllegalState, "the stream is not capturing"};
  Capture* c = it->second.cap;
  if (c->invalid) return {Err::kInvalidated, "the stream's capture was invalidated"};
  for (Node* d : deps) {
    if (!c->graph->Contains(d)) {
      return {Err::kInvalidValue, fmt::format("node {} is not in the capture's graph",
                                              static_cast<const void*>(d))};
    }
  }
  std::vector<Node*>& cur = it->second.deps;
  if (!add) cur.clear();
  for (Node* d : deps) {
    if (std::find(cur.begin(), cur.end(), d) == cur.end()) cur.push_back(d);
  }
  return {};
}

void CaptureTable::RecordEvent(const void* event, const void* stream) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) {
    events_.erase(event);
    return;
  }
  events_[event] = {it->second.cap, it->second.deps};
}

bool CaptureTable::EventCaptured(const void* event) const {
  auto it = events_.find(event);
  return it != events_.end() && captures_.count(it->second.cap);
}

bool CaptureTable::HostUsesCapturedEvent(const void* event, const std::string& call) {
  if (!EventCaptured(event)) return false;
  Capture* c = events_.at(event).cap;
  if (!c->invalid) {
    c->invalid = true;
    c->invalid_why = fmt::format("{} was called on an event recorded in it", call);
  }
  return true;
}

Result CaptureTable::WaitEvent(const void* stream, const void* event, bool* captured) {
  auto sit = streams_.find(stream);
  const bool ev_captured = EventCaptured(event);
  *captured = ev_captured || sit != streams_.end();
  if (!*captured) return {};
  if (!ev_captured) {
    Invalidate(stream, "it waited for an event recorded outside the capture");
    return {Err::kIsolation, "a capturing stream waits for an event recorded outside its capture "
                             "(CU_EVENT_WAIT_EXTERNAL makes that an event-wait node)"};
  }
  const EventState& ev = events_.at(event);
  if (sit == streams_.end()) {
    // Fork: the stream joins the event's capture, after the event's nodes.
    if (ev.cap->invalid) {
      return {Err::kInvalidated, fmt::format("the event's capture was invalidated ({})",
                                             ev.cap->invalid_why)};
    }
    streams_[stream] = {ev.cap, ev.nodes};
    ev.cap->streams.insert(stream);
    return {};
  }
  if (sit->second.cap != ev.cap) {
    std::string why = "it waited for an event of another capture";
    Invalidate(stream, why);
    return {Err::kIsolation, "the stream waits for an event recorded in another capture (the two "
                             "would merge)"};
  }
  if (ev.cap->invalid) return {Err::kInvalidated, "the stream's capture was invalidated"};
  std::vector<Node*>& cur = sit->second.deps;
  for (Node* d : ev.nodes) {
    if (std::find(cur.begin(), cur.end(), d) == cur.end()) cur.push_back(d);
  }
  return {};
}

void CaptureTable::Drop(Capture* c) {
  for (const void* s : c->streams) streams_.erase(s);
  for (auto it = events_.begin(); it != events_.end();) {
    it = it->second.cap == c ? events_.erase(it) : std::next(it);
  }
  captures_.erase(c);
  delete c;
}

Result CaptureTable::End(const void* stream, uint64_t thread, Graph** out) {
  *out = nullptr;
  auto it = streams_.find(stream);
  if (it == streams_.end()) return {Err::kNotCapturing, "the stream is not capturing"};
  Capture* c = it->second.cap;
  if (c->origin != stream) {
    return {Err::kUnmatched, "the capture was begun on another stream (this one joined it "
                             "through an event)"};
  }
  if (c->mode != Mode::kRelaxed && c->thread != thread) {
    return {Err::kWrongThread, "a capture not begun in relaxed mode must be ended by the thread "
                               "that began it"};
  }
  Result r;
  if (c->invalid) {
    r = {Err::kInvalidated, fmt::format("the capture was invalidated ({})", c->invalid_why)};
  } else {
    // Every other stream's dependencies must be ancestors of (or among) the origin's: its work
    // was joined back.
    std::set<const Node*> seen;
    std::vector<const Node*> todo(it->second.deps.begin(), it->second.deps.end());
    while (!todo.empty()) {
      const Node* n = todo.back();
      todo.pop_back();
      if (!seen.insert(n).second) continue;
      for (const Node* d : n->deps) todo.push_back(d);
    }
    for (const void* s : c->streams) {
      if (s == stream) continue;
      for (const Node* d : streams_.at(s).deps) {
        if (!seen.count(d)) {
          r = {Err::kUnjoined, fmt::format("stream {} forked from the capture and its work was "
                                           "not joined back into the origin stream (record an "
                                           "event on it and wait for that event on the origin)",
                                           s)};
          break;
        }
      }
      if (!r.ok()) break;
    }
  }
  if (r.ok()) {
    *out = c->graph;
  } else if (c->owns_graph) {
    delete c->graph;
  }
  Drop(c);
  return r;
}

void CaptureTable::ForgetStream(const void* stream) {
  auto it = streams_.find(stream);
  if (it == streams_.end()) return;
  Capture* c = it->second.cap;
  if (c->origin == stream) {
    if (c->owns_graph) delete c->graph;
    Drop(c);
    return;
  }
  Invalidate(stream, "a stream of it was destroyed");
  c->streams.erase(stream);
  streams_.erase(it);
}

bool CaptureTable::Uses(const Graph* g) const {
  for (const Capture* c : captures_) {
    if (c->graph == g) return true;
  }
  return false;
}

void CaptureTable::Invalidate(const void* stream, const std::string& why) {
  Capture* c = Of(stream);
  if (c && !c->invalid) {
    c->invalid = true;
    c->invalid_why = why;
  }
}

Result CaptureTable::Unsafe(uint64_t thread, Mode thread_mode, const std::string& call) {
  if (thread_mode == Mode::kRelaxed) return {};
  std::vector<Capture*> forbidding;
  for (Capture* c : captures_) {
    const bool own = c->thread == thread && c->mode != Mode::kRelaxed;
    const bool other_global = thread_mode == Mode::kGlobal && c->thread != thread &&
                              c->mode == Mode::kGlobal;
    if (own || other_global) forbidding.push_back(c);
  }
  if (forbidding.empty()) return {};
  for (Capture* c : forbidding) {
    if (!c->invalid) {
      c->invalid = true;
      c->invalid_why = fmt::format("{} was called during it", call);
    }
  }
  return {Err::kUnsupported, fmt::format("a synchronous call is not permitted while a stream "
                                         "capture is going on ({} mode; the capture is "
                                         "invalidated)",
                                         forbidding.front()->mode == Mode::kGlobal ? "global"
                                                                                   : "thread-local")};
}

}  // namespace gpool::remote::client::graph
