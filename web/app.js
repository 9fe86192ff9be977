// gpool dashboard. Plain JavaScript, no build step, no dependencies: it polls the controller's
// /api/state (nodes, jobs, tenants), /api/history (utilization samples) and /api/fabric (the
// InfiniBand fabric, when the controller serves one) and redraws. Everything user-supplied
// (job commands, tenant and node names) is HTML-escaped before it reaches innerHTML.
"use strict";

const $ = (id) => document.getElementById(id);
const PALETTE = ["#4fb3ff", "#b48cff", "#3fbf7f", "#ff9f5a", "#f06ca8", "#3cc9c9", "#e6d34f",
                 "#8fa8ff", "#c77dff", "#7ed957"];
const LEAF_SIZE = 16;        // the controller's node grouping without a fabric (controller.h)
const MAX_ROWS = 200;        // job rows drawn; the rest are counted

const ui = {
  state: null,          // last /api/state
  fabric: undefined,    // last /api/fabric; null when the controller has none (HTTP 404)
  fabricTopo: null,     // last /api/fabric?links=all (every link), for the drawing
  fabricChecked: 0,     // ms of the last full /api/fabric?links=all attempt
  history: [],          // samples, oldest first
  historyCap: 3600,
  tab: "active",
  filter: "",
  selected: null,       // job id
  timer: null,
  tenantColor: new Map(),
  token: "",            // only when sessionStorage is unavailable (see token())
};

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
                                                  '"': "&quot;", "'": "&#39;"}[c]));
}
const fmt = (n) => Number(n || 0).toLocaleString("en-US");
const pct = (a, b) => (b > 0 ? Math.round((100 * a) / b) : 0) + "%";
const popcount = (m) => { let c = 0; for (m >>>= 0; m; m &= m - 1) c++; return c; };
const num = (v) => Number(v || 0);  // proto3 JSON prints int64 as strings and omits zeros

function dur(ms) {
  if (ms < 0) ms = 0;
  const s = Math.round(ms / 1000);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
}

const clock = (ms) => new Date(ms).toLocaleTimeString("en-GB", {hour12: false});

// A stable colour per tenant: by first appearance in name order (tenants rarely change).
function colorOf(tenant) {
  if (!ui.tenantColor.has(tenant)) {
    ui.tenantColor.set(tenant, PALETTE[ui.tenantColor.size % PALETTE.length]);
  }
  return ui.tenantColor.get(tenant);
}

// The access token (controllers with --auth-tokens): given once in the URL fragment
// (#token=TOKEN, which browsers never send to the server, so it stays out of access logs,
// proxies and Referer headers), then kept in this tab's sessionStorage and removed from the
// address bar. It is sent as `Authorization: Bearer` on every /api call; nothing is a cookie, so
// no other site can make the browser send it (no CSRF).
const TOKEN_KEY = "gpool.token";
function takeTokenFromUrl() {
  const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (!m) return;
  try { sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1])); } catch (e) { ui.token = decodeURIComponent(m[1]); }
  const rest = location.hash.replace(/(^#|&)token=[^&]*/, "$1").replace(/^#&/, "#").replace(/&$/, "");
  history.replaceState(null, "", rest === "#" ? location.pathname + location.search : rest);
}
function token() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ui.token || ""; } catch (e) { return ui.token || ""; }
}

async function getJson(url) {
  const t = token();
  const r = await fetch(url, {cache: "no-store", headers: t ? {Authorization: "Bearer " + t} : {}});
  if (!r.ok) {
    let why = "";
    try { why = (await r.json()).error || ""; } catch (e) { /* not JSON */ }
    const e = new Error(url + ": HTTP " + r.status + (why ? " (" + why + ")" : ""));
    e.status = r.status;
    throw e;
  }
  return r.json();
}

// ---- Model: derive everything the views need from one /api/state ----

// Not schedulable: missed heartbeats ("down"), powered off by the controller ("off") or did not
// come back from a resume ("resume-failed", src/control/node_power.h).
const offline = (n) => n.state === "down" || n.state === "off" || n.power === "off" ||
                       n.power === "resume-failed";

function derive(st) {
  const nodes = (st.nodes || []).slice().sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  const jobs = st.jobs || [];
  const tenants = (st.tenants || []).slice().sort((a, b) => (a.name < b.name ? -1 : 1));
  tenants.forEach((t) => colorOf(t.name));
  const gpuOwner = new Map();  // "node/gpu" -> job
  const jobsById = new Map();
  for (const j of jobs) {
    jobsById.set(j.id, j);
    if (j.state !== "running") continue;
    for (const a of j.allocations || []) {
      if (a.finished) continue;
      for (let g = 0; g < 32; g++) if ((num(a.gpu_mask) >>> g) & 1) gpuOwner.set(a.node + "/" + g, j);
      // Remote attachment: GPUs of other nodes, used through their GPU servers, are the job's too.
      for (const r of a.remote || []) {
        for (let g = 0; g < 32; g++) if ((num(r.gpu_mask) >>> g) & 1) gpuOwner.set(r.node + "/" + g, j);
      }
    }
  }
  const m = {nodes, jobs, tenants, gpuOwner, jobsById, total: 0, alloc: 0, down: 0, downNodes: 0,
             running: 0, pending: 0, pendingGpus: 0, finished: 0, models: new Map()};
  for (const n of nodes) {
    const g = num(n.gpus), a = num(n.gpus_allocated), isDown = offline(n);
    m.total += g;
    m.alloc += a;
    if (isDown) { m.down += g; m.downNodes++; }
    const model = n.gpu_model || "?";
    if (!m.models.has(model)) m.models.set(model, {nodes: 0, gpus: 0, alloc: 0, down: 0});
    const x = m.models.get(model);
    x.nodes++; x.gpus += g; x.alloc += a; if (isDown) x.down += g;
  }
  for (const j of jobs) {
    if (j.state === "running") m.running++;
    else if (j.state === "pending") { m.pending++; m.pendingGpus += num(j.gpus); }
    else m.finished++;
  }
  // Idle = schedulable and free; GPUs allocated on a down node count as allocated (as /metrics).
  m.idle = 0;
  for (const n of nodes) if (!offline(n)) m.idle += Math.max(0, num(n.gpus) - num(n.gpus_allocated));
  return m;
}

// ---- Views ----

function setText(id, text) { const e = $(id); if (e.textContent !== text) e.textContent = text; }

function renderKpis(m) {
  setText("kpi-gpus", fmt(m.total));
  setText("kpi-nodes", fmt(m.nodes.length) + " nodes");
  setText("kpi-alloc", fmt(m.alloc));
  setText("kpi-alloc-pct", pct(m.alloc, m.total) + " of the pool");
  setText("kpi-idle", fmt(m.idle));
  setText("kpi-idle-pct", pct(m.idle, m.total) + " free to schedule");
  setText("kpi-down", fmt(m.down));
  setText("kpi-down-nodes", m.downNodes ? fmt(m.downNodes) + " nodes down or off" : "all nodes up");
  setText("kpi-running", fmt(m.running));
  setText("kpi-finished", fmt(m.finished) + " finished or cancelled");
  setText("kpi-pending", fmt(m.pending));
  setText("kpi-pending-gpus", fmt(m.pendingGpus) + " GPUs requested");
  document.body.dataset.nodes = m.nodes.length;
  document.body.dataset.gpus = m.total;
  document.body.dataset.jobs = m.jobs.length;
}

function renderModels(m) {
  let h = "<thead><tr><th>model</th><th class=num>nodes</th><th class=num>GPUs</th>" +
          "<th class=num>alloc</th><th class=num>idle</th><th class=num>down</th><th></th></tr></thead><tbody>";
  for (const [model, x] of m.models) {
    const idle = Math.max(0, x.gpus - x.alloc - x.down);
    const w = (v) => (x.gpus ? (100 * v) / x.gpus : 0).toFixed(2) + "%";
    h += `<tr><td>${esc(model)}</td><td class=num>${fmt(x.nodes)}</td><td class=num>${fmt(x.gpus)}</td>` +
         `<td class=num>${fmt(x.alloc)}</td><td class=num>${fmt(idle)}</td><td class=num>${fmt(x.down)}</td>` +
         `<td style="width:35%"><div class=bar><span style="width:${w(x.alloc)};background:var(--accent)"></span>` +
         `<span style="width:${w(idle)};background:var(--idle)"></span><span style="width:${w(x.down)};background:var(--down)"></span></div></td></tr>`;
  }
  if (!m.models.size) h += "<tr><td colspan=7 class=muted>no nodes registered</td></tr>";
  $("models").innerHTML = h + "</tbody>";
}

function renderTenants(m) {
  let h = "";
  // The track is the whole pool, so tenants compare with each other and with their quota.
  const scale = Math.max(m.total, ...m.tenants.map((t) => Math.max(num(t.quota_gpus), num(t.gpus_in_use))), 1);
  for (const t of m.tenants) {
    const use = num(t.gpus_in_use), q = num(t.quota_gpus), c = colorOf(t.name);
    const within = q > 0 ? Math.min(use, q) : use;
    const over = q > 0 ? Math.max(0, use - q) : 0;
    const quotaTxt = q > 0 ? ` / ${fmt(q)} quota (${pct(use, q)})` : " (no quota)";
    h += `<div class=tenant data-tenant="${esc(t.name)}"><div class=row><span><i class=swatch style="background:${c}"></i>` +
         `<b>${esc(t.name)}</b></span><span>${fmt(use)} GPUs${quotaTxt} &middot; ${fmt(num(t.running_jobs))} running &middot; ` +
         `${fmt(num(t.pending_jobs))} queued</span></div><div class=track>` +
         `<div class=fill style="width:${(100 * (within + over)) / scale}%;background:${c}"></div>` +
         (over ? `<div class=over style="left:${(100 * within) / scale}%;width:${(100 * over) / scale}%"></div>` : "") +
         (q > 0 ? `<div class=quota title="quota ${fmt(q)}" style="left:${Math.min(99.6, (100 * q) / scale)}%"></div>` : "") +
         `</div></div>`;
  }
  $("tenants").innerHTML = h || "<div class=muted>no tenants yet</div>";
}

// The GPU cells of one node, in a row at (x, y); `cell` is the pitch in SVG units.
function nodeCells(m, n, x, y, cell, rowH = cell) {
  let h = "";
  const g = num(n.gpus), isDown = offline(n);
  const owners = new Set();
  for (let i = 0; i < g; i++) {
    const j = m.gpuOwner.get(n.name + "/" + i);
    let cls = "gpu idle", fill = "", data = "";
    if (j) {
      owners.add(j.id);
      cls = "gpu busy" + (j.id === ui.selected ? " sel" : "");
      fill = ` style="fill:${colorOf(j.tenant)}"`;
      data = ` data-job="${esc(j.id)}"`;
    } else if (isDown) {
      cls = "gpu down";
    }
    h += `<rect class="${cls}"${fill}${data} x="${x + i * cell}" y="${y}" width="${cell - 1}" height="${rowH - 1}"/>`;
  }
  if (isDown) h += `<rect class=node-down x="${x - 0.5}" y="${y - 0.5}" width="${g * cell}" height="${rowH}"/>`;
  const tip = `${n.name}: ${n.gpu_model || "?"}, ${n.state}, ${num(n.gpus_allocated)}/${g} GPUs allocated` +
              (owners.size ? "; jobs " + [...owners].join(" ") : "");
  return `<g data-node="${esc(n.name)}"><title>${esc(tip)}</title>${h}</g>`;
}

// Without /api/fabric: the controller's own model, leaves of 16 nodes in name order under one
// spine layer (what the scheduler places against; docs/control-plane.md).
function renderGroupedFabric(m) {
  const gpn = Math.max(1, ...m.nodes.map((n) => num(n.gpus))), pad = 4;
  const leaves = [];
  for (let i = 0; i < m.nodes.length; i += LEAF_SIZE) leaves.push(m.nodes.slice(i, i + LEAF_SIZE));
  // Up to 16 leaves (2,048 GPUs at 8 per node) side by side; bigger pools wrap to more rows.
  const width = 1000, gap = 6;
  const across = Math.max(1, Math.min(16, leaves.length));
  const cell = Math.max(4, Math.min(14, Math.floor(((width + gap) / across - gap - 2 * pad) / gpn)));
  const rowH = Math.min(14, Math.round(cell * 1.5));  // taller than wide: the panel is wide
  const leafW = gpn * cell + 2 * pad, leafH = LEAF_SIZE * rowH + 2 * pad + 26;
  const perRow = Math.max(1, Math.min(leaves.length, Math.floor((width + gap) / (leafW + gap))));
  const rows = Math.ceil(leaves.length / perRow);
  const top = 34, bandH = leafH + 30;
  const height = top + rows * bandH;
  const selNodes = selectedNodes(m);
  const at = new Map();  // node -> centre of its GPU row, for the remote arcs
  let h = `<rect class=spine x="0" y="2" width="${width}" height="16" rx="3"/>` +
          `<text class=sw-label x="8" y="14">spine layer (no fabric data: uniform tree of ${LEAF_SIZE}-node leaves, as the controller places)</text>`;
  leaves.forEach((leaf, li) => {
    const x = (li % perRow) * (leafW + gap), y = top + Math.floor(li / perRow) * bandH + 16;
    const hit = leaf.some((n) => selNodes.has(n.name));
    h += `<line class=uplink x1="${x + leafW / 2}" y1="18" x2="${x + leafW / 2}" y2="${y}"/>`;
    h += `<rect class="leaf-box${hit ? " hit" : ""}" x="${x}" y="${y}" width="${leafW}" height="${leafH}" rx="4"/>`;
    h += `<text class=leaf-label x="${x + pad}" y="${y + 12}">leaf ${li}</text>`;
    leaf.forEach((n, ni) => {
      h += nodeCells(m, n, x + pad, y + 18 + ni * rowH, cell, rowH);
      at.set(n.name, {x: x + pad + (gpn * cell) / 2, y: y + 18 + ni * rowH + rowH / 2});
    });
    const used = leaf.reduce((a, n) => a + num(n.gpus_allocated), 0);
    const all = leaf.reduce((a, n) => a + num(n.gpus), 0);
    h += `<text class=leaf-label x="${x + pad}" y="${y + leafH - 6}">${used}/${all}</text>`;
  });
  const arcs = remoteArcs(m, at);
  return {svg: `<svg viewBox="0 -1 ${width} ${height}" preserveAspectRatio="xMinYMin meet">${h}${arcs.svg}</svg>`,
          arcs: arcs.count,
          source: `${fmt(m.nodes.length)} nodes in ${leaves.length} leaves (controller grouping)`};
}

// With /api/fabric (the controller runs with --fabric; schema in docs/control-plane.md,
// "Fabric"): switches in layers by `level` (0 = leaf, at the bottom), the leaf-spine links
// coloured by state (down: red, held by damping: orange, both dashed) and load (flows routed
// over them by running jobs), the hosts' GPUs grouped by their leaf domain under the leaves.
// A selected job's links are drawn white on top.
const natural = (a, b) => a.localeCompare(b, "en", {numeric: true});

function renderRealFabric(m, fab, topo) {
  const switches = (fab.switches || []).slice().sort((a, b) => natural(a.name, b.name));
  if (!switches.length) return null;
  const hosts = fab.hosts || [];
  const sw = new Map(switches.map((x) => [x.name, x]));
  const hcaHost = new Map();
  for (const h of hosts) for (const c of h.hcas || []) hcaHost.set(c, h.name);
  // Current state and load of a link: /api/fabric lists the loaded or not-up ones; any other
  // link of the topology (from ?links=all) is up and idle.
  const key = (l) => (l.a < l.b ? l.a + "|" + l.b : l.b + "|" + l.a);
  const live = new Map((fab.links || []).map((l) => [key(l), l]));
  const all = new Map(((topo && topo.links) || []).map((l) => [key(l), l]));
  for (const [k, l] of live) all.set(k, l);
  const links = [...all.entries()].map(([k, l]) => live.get(k) || {...l, state: "up", flows: 0, jobs: []});

  const maxLevel = Math.max(0, ...switches.map((x) => num(x.level)));
  const W = 1000, swH = 12, layerGap = 80, top = 6;
  const pos = new Map();
  for (let lv = maxLevel; lv >= 0; lv--) {
    const names = switches.filter((x) => num(x.level) === lv).map((x) => x.name);
    const per = W / Math.max(1, names.length);
    names.forEach((n, i) => pos.set(n, {x: i * per + per / 2, y: top + (maxLevel - lv) * layerGap, w: Math.max(2, Math.min(26, per - 2))}));
  }
  const sel = ui.selected;
  const selSwitches = new Set();
  const maxFlows = Math.max(1, ...links.map((l) => num(l.flows)));
  let idle = "", loaded = "", selected = "";
  const hostLeaves = new Map();  // leaf domain -> Set(leaf switch)
  const domainOf = new Map(hosts.map((h) => [h.name, h.leaf || "?"]));
  let down = 0;
  for (const l of links) {
    const a = pos.get(l.a), b = pos.get(l.b);
    if (!a || !b) {  // a host link: remember which leaves each leaf domain hangs from
      const host = hcaHost.get(l.a) || hcaHost.get(l.b), s = pos.has(l.a) ? l.a : pos.has(l.b) ? l.b : null;
      if (host && s) {
        const d = domainOf.get(host);
        if (!hostLeaves.has(d)) hostLeaves.set(d, new Set());
        hostLeaves.get(d).add(s);
      }
      if (l.state !== "up") down++;
      continue;
    }
    const [hi, lo] = a.y <= b.y ? [a, b] : [b, a];
    const coords = `x1="${hi.x.toFixed(1)}" y1="${hi.y + swH}" x2="${lo.x.toFixed(1)}" y2="${lo.y}"`;
    const tip = `<title>${esc(l.a)}[${num(l.a_port)}] - ${esc(l.b)}[${num(l.b_port)}]: ${esc(l.state)}, ` +
                `${num(l.flows)} flows${(l.jobs || []).length ? ", jobs " + l.jobs.map(esc).join(" ") : ""}</title>`;
    if (l.state !== "up") {
      down++;
      loaded += `<line class="link ${l.state === "held" ? "held" : "down"}" ${coords}>${tip}</line>`;
    } else if (num(l.flows) > 0) {
      const f = num(l.flows) / maxFlows;
      loaded += `<line ${coords} stroke="hsl(${200 - 200 * f},75%,${45 + 12 * f}%)" stroke-width="${(0.7 + 1.8 * f).toFixed(2)}">${tip}</line>`;
    } else {
      idle += `<line class="link idle" ${coords}/>`;
    }
    if (sel && (l.jobs || []).includes(sel)) {
      selected += `<line class="link sel" ${coords}>${tip}</line>`;
      selSwitches.add(l.a); selSwitches.add(l.b);
    }
  }
  // Leaf domains (hosts sharing a set of leaves) in a row under the leaf switches.
  const domains = [...new Set(hosts.map((h) => h.leaf || "?"))].sort(natural);
  const nodeByName = new Map(m.nodes.map((n) => [n.name, n]));
  const gpn = Math.max(1, ...m.nodes.map((n) => num(n.gpus)), 8);
  const gap = 8, blockW = W / Math.max(1, domains.length) - gap;
  // Hosts in columns of at most 16 inside each domain's block, cells as large as that allows.
  const most = Math.max(1, ...domains.map((d) => hosts.filter((h) => (h.leaf || "?") === d).length));
  const cols = Math.max(1, Math.min(Math.ceil(most / 16), Math.floor((blockW - 4) / (gpn * 2 + 4))));
  const cell = Math.max(2, Math.min(8, Math.floor((blockW - 4 - (cols - 1) * 4) / (cols * gpn))));
  const rowH = Math.max(3, Math.round(cell * 1.3));
  const hostTop = top + maxLevel * layerGap + swH + 56;
  let cells = "", frames = "", ups = "", maxRows = 0;
  const selNodes = selectedNodes(m);
  const at = new Map();  // host -> centre of its GPU row, for the remote arcs
  domains.forEach((d, di) => {
    const list = hosts.filter((h) => (h.leaf || "?") === d).sort((a, b) => natural(a.name, b.name));
    const x0 = di * (blockW + gap) + gap / 2, rows = Math.ceil(list.length / cols);
    maxRows = Math.max(maxRows, rows);
    const hit = list.some((h) => selNodes.has(h.name));
    frames += `<rect class="leaf-box${hit ? " hit" : ""}" x="${x0}" y="${hostTop - 14}" width="${blockW}" height="{H}" rx="4"/>` +
              `<text class=leaf-label x="${x0 + 4}" y="${hostTop - 4}">${esc(d)}</text>`;
    for (const s of hostLeaves.get(d) || []) {
      const p = pos.get(s);
      ups += `<line class=uplink x1="${p.x.toFixed(1)}" y1="${p.y + swH}" x2="${(x0 + blockW / 2).toFixed(1)}" y2="${hostTop - 14}"/>`;
    }
    list.forEach((h, i) => {
      const x = x0 + 4 + Math.floor(i / rows) * (gpn * cell + 4), y = hostTop + 2 + (i % rows) * rowH;
      const node = nodeByName.get(h.name);
      at.set(h.name, {x: x + (gpn * cell) / 2, y: y + rowH / 2});
      if (node) cells += nodeCells(m, node, x, y, cell, rowH);
      else cells += `<rect class="gpu idle" x="${x}" y="${y}" width="${gpn * cell - 1}" height="${rowH - 1}"><title>${esc(h.name)}: no agent registered</title></rect>`;
      if (h.reachable === false) cells += `<rect class=node-down x="${x - 0.5}" y="${y - 0.5}" width="${gpn * cell}" height="${rowH}"><title>${esc(h.name)}: unreachable</title></rect>`;
    });
  });
  const blockH = maxRows * rowH + 20;
  frames = frames.replaceAll("{H}", String(blockH));
  let sws = "";
  for (const [name, p] of pos) {
    const x = sw.get(name), bad = x.up === false;
    sws += `<rect class="switch${bad ? " dead" : ""}${selSwitches.has(name) ? " hit" : ""}" x="${(p.x - p.w / 2).toFixed(1)}" y="${p.y}" ` +
           `width="${p.w.toFixed(1)}" height="${swH}" rx="2"><title>${esc(name)} (level ${num(x.level)}, ${num(x.ports)} ports${bad ? ", DOWN" : ""})</title></rect>`;
  }
  const height = hostTop + blockH;
  const health = fab.health || {};
  const affected = health.affected_jobs || [];
  const deadSw = (health.dead_switches || []).length;
  let src = `${fmt(switches.length)} switches, ${fmt(hosts.length)} hosts, ${fmt(num(fab.num_links) || links.length)} links, ` +
            `routing ${esc(fab.engine || "?")}, generation ${num(fab.generation)}`;
  src += health.healthy === false ? ` · <b class=bad>${fmt((health.dead_links || []).length || down)} links down` +
         `${deadSw ? `, ${deadSw} switches down` : ""}</b>` : " · healthy";
  if (affected.length) {
    src += ` · <b class=bad>jobs on broken routes: ${affected.slice(0, 6).map((a) => esc(a.id)).join(" ")}` +
           `${affected.length > 6 ? ` +${affected.length - 6}` : ""}</b>`;
  }
  const arcs = remoteArcs(m, at);
  return {svg: `<svg viewBox="0 0 ${W} ${height}" preserveAspectRatio="xMinYMin meet">${idle}${ups}${loaded}${selected}${sws}${frames}${cells}${arcs.svg}</svg>`,
          html: true, source: src, arcs: arcs.count};
}

// Remote attachment (Allocation.remote): a dashed arc, in the tenant's colour, from the host a
// running task's process runs on to each node lending it GPUs through its GPU server; one arc
// per (host, lender) pair of a job, its title naming the job, the tasks and the GPUs. `at`: node
// name -> {x, y}, the centre of its GPU row; a node not drawn (no agent, not a fabric host) gets
// no arc. The traffic itself is on the fabric's links (/api/fabric counts it as flows).
function remoteArcs(m, at) {
  const pairs = new Map();  // job id + host + lender -> {j, host, lender, tasks, gpus}
  for (const j of m.jobs) {
    if (j.state !== "running") continue;
    for (const a of j.allocations || []) {
      if (a.finished) continue;
      for (const r of a.remote || []) {
        if (!r.node || r.node === a.node) continue;  // its own node's server: no fabric hop
        const k = j.id + "\n" + a.node + "\n" + r.node;
        if (!pairs.has(k)) pairs.set(k, {j, host: a.node, lender: r.node, tasks: [], gpus: 0});
        const p = pairs.get(k);
        p.tasks.push(num(a.task));
        p.gpus += popcount(num(r.gpu_mask));
      }
    }
  }
  let svg = "", count = 0;
  for (const {j, host, lender, tasks, gpus} of pairs.values()) {
    const p = at.get(host), q = at.get(lender);
    if (!p || !q) continue;
    // Bow the arc upwards (sideways when the two rows are stacked) so it clears the GPU rows.
    const dx = q.x - p.x, near = Math.abs(dx) < 20;
    const cx = (p.x + q.x) / 2 + (near ? 40 : 0), cy = Math.min(p.y, q.y) - (near ? 0 : Math.min(60, 12 + Math.abs(dx) / 6));
    const d = `M${p.x.toFixed(1)},${p.y.toFixed(1)} Q${cx.toFixed(1)},${cy.toFixed(1)} ${q.x.toFixed(1)},${q.y.toFixed(1)}`;
    const tip = `job ${j.id} (${j.tenant}): task${tasks.length > 1 ? "s" : ""} ${tasks.join(", ")} on ${host} ` +
                `use${tasks.length > 1 ? "" : "s"} ${gpus} GPU${gpus === 1 ? "" : "s"} of ${lender} through its GPU server`;
    svg += `<path class="remote${j.id === ui.selected ? " sel" : ""}" d="${d}" stroke="${colorOf(j.tenant)}" ` +
           `data-job="${esc(j.id)}" data-host="${esc(host)}" data-lender="${esc(lender)}"><title>${esc(tip)}</title></path>`;
    count++;
  }
  return {svg, count};
}

function selectedNodes(m) {
  const j = ui.selected && m.jobsById.get(ui.selected);
  const out = new Set();
  for (const a of (j && j.allocations) || []) {
    out.add(a.node);
    for (const r of a.remote || []) out.add(r.node);  // lenders hold its GPUs too
  }
  return out;
}

function renderFabric(m) {
  let r = null;
  if (ui.fabric) {
    try { r = renderRealFabric(m, ui.fabric, ui.fabricTopo); } catch (e) { showError("fabric view: " + e.message); }
  }
  if (!r) r = renderGroupedFabric(m);
  const f = $("fabric");
  f.innerHTML = r.svg;
  f.classList.toggle("has-sel", !!(ui.selected && m.gpuOwner.size && [...m.gpuOwner.values()].some((j) => j.id === ui.selected)));
  $("fabric-source").innerHTML = r.html ? r.source : esc(r.source);  // html: escaped by the renderer
  let lg = "<span><i style='background:var(--idle)'></i>idle</span><span><i style='background:var(--down)'></i>down / off</span>";
  for (const t of m.tenants) lg += `<span><i style="background:${colorOf(t.name)}"></i>${esc(t.name)}</span>`;
  if (ui.fabric) {
    lg += "<span><i style='background:hsl(200,75%,45%)'></i>link lightly loaded</span><span><i style='background:hsl(0,75%,57%)'></i>most loaded</span>" +
          "<span><i style='background:#ff4d57'></i>link down (dashed)</span><span><i style='background:#f0a030'></i>held by damping</span>";
  }
  if (r.arcs) lg += "<span><i class=dash></i>remote GPUs: task's host to lending node (dashed)</span>";
  $("fabric-legend").innerHTML = lg;
}

function jobsForTab(m) {
  const f = ui.filter.toLowerCase();
  let list = m.jobs.filter((j) => {
    switch (ui.tab) {
      case "active": return j.state === "running" || j.state === "pending";
      case "pending": return j.state === "pending";
      case "running": return j.state === "running";
      case "done": return j.state !== "running" && j.state !== "pending";
      default: return true;
    }
  });
  if (f) {
    list = list.filter((j) => j.id.toLowerCase().includes(f) || (j.tenant || "").toLowerCase().includes(f) ||
                              (j.command || []).join(" ").toLowerCase().includes(f));
  }
  const order = {pending: 0, running: 1};
  list.sort((a, b) => {
    if (ui.tab === "done" || ui.tab === "all") return num(b.end_ms || b.submit_ms) - num(a.end_ms || a.submit_ms);
    const sa = order[a.state] ?? 2, sb = order[b.state] ?? 2;
    if (sa !== sb) return sa - sb;
    if (a.state === "pending" && num(a.priority) !== num(b.priority)) return num(b.priority) - num(a.priority);
    return a.id < b.id ? -1 : 1;
  });
  return list;
}

function renderJobs(m, now) {
  const list = jobsForTab(m);
  const hurt = new Set(((ui.fabric && ui.fabric.health && ui.fabric.health.affected_jobs) || []).map((a) => a.id));
  let h = "<thead><tr><th>job</th><th>tenant</th><th>state</th><th class=num>GPUs</th><th class=num>tasks</th>" +
          "<th class=num>prio</th><th class=num>waited</th><th class=num>ran</th><th>nodes / why pending</th><th>command</th></tr></thead><tbody>";
  for (const j of list.slice(0, MAX_ROWS)) {
    const submit = num(j.submit_ms), start = num(j.start_ms), end = num(j.end_ms);
    const waited = start ? start - submit : (j.state === "pending" ? now - submit : 0);
    const ran = start ? (end || now) - start : 0;
    const nodes = [...new Set((j.allocations || []).map((a) => a.node))];
    const nodeTxt = nodes.length > 2 ? `${nodes.slice(0, 2).join(", ")} +${nodes.length - 2}` : nodes.join(", ");
    // A pending job's nodes cell says why it waits (the scheduler's reason; escaped below).
    const why = j.state === "pending" ? (j.pending_reason || j.message || "") : "";
    h += `<tr id="job-${esc(j.id)}" data-job="${esc(j.id)}"${j.id === ui.selected ? " class=sel" : ""}>` +
         `<td>${esc(j.id)}</td><td><i class=swatch style="background:${colorOf(j.tenant)}"></i>${esc(j.tenant)}</td>` +
         `<td><span class="state ${esc(j.state)}">${esc(j.state)}</span>` +
         `${hurt.has(j.id) ? ' <span class="state hurt" title="a link on its routes is down">fabric</span>' : ""}</td><td class=num>${fmt(num(j.gpus))}</td>` +
         `<td class=num>${num(j.num_tasks)}&times;${num(j.gpus_per_task)}</td><td class=num>${num(j.priority)}</td>` +
         `<td class=num>${dur(waited)}</td><td class=num>${start ? dur(ran) : "&ndash;"}</td>` +
         (why ? `<td class=why title="${esc(why)}">${esc(why)}</td>` : `<td>${esc(nodeTxt)}</td>`) + `<td class=cmd title="${esc((j.command || []).join(" "))}">${esc((j.command || []).join(" "))}</td></tr>`;
  }
  if (!list.length) h += "<tr><td colspan=10 class=muted>no jobs here</td></tr>";
  $("jobs").innerHTML = h + "</tbody>";
  setText("jobs-count", list.length > MAX_ROWS ? `showing ${MAX_ROWS} of ${fmt(list.length)}` : `${fmt(list.length)} jobs`);
}

function renderDetail(m, now) {
  const j = ui.selected && m.jobsById.get(ui.selected);
  if (!j) {
    $("job-detail").innerHTML = ui.selected ? `Job ${esc(ui.selected)} is not known to the controller.` :
      "Click a job (or a GPU) to see it and highlight its placement.";
    $("job-detail").classList.add("muted");
    return;
  }
  $("job-detail").classList.remove("muted");
  const per = new Map();
  for (const a of j.allocations || []) per.set(a.node, (per.get(a.node) || 0) + popcount(num(a.gpu_mask)));
  const leaves = new Set([...per.keys()].map((n) => Math.floor(m.nodes.findIndex((x) => x.name === n) / LEAF_SIZE)));
  const shown = [...per].slice(0, 8).map(([n, g]) => `${esc(n)}&times;${g}`).join(", ");
  const place = per.size > 8 ? `${shown} and ${fmt(per.size - 8)} more` : shown;
  // Remote attachment: which hosts use which lenders' GPUs (through their GPU servers).
  const lent = new Map();  // "host <- lender" -> GPUs
  for (const a of j.allocations || []) {
    for (const r of a.remote || []) {
      const k = `${esc(a.node)} &larr; ${esc(r.node)}`;
      lent.set(k, (lent.get(k) || 0) + popcount(num(r.gpu_mask)));
    }
  }
  const remote = [...lent].slice(0, 8).map(([k, g]) => `${k}&times;${g}`).join(", ") + (lent.size > 8 ? ` and ${fmt(lent.size - 8)} more` : "");
  const submit = num(j.submit_ms), start = num(j.start_ms), end = num(j.end_ms);
  $("job-detail").innerHTML = `<dl>
    <dt>job</dt><dd id=detail-id><b>${esc(j.id)}</b> <span class="state ${esc(j.state)}">${esc(j.state)}</span></dd>
    <dt>tenant</dt><dd><i class=swatch style="background:${colorOf(j.tenant)}"></i>${esc(j.tenant)} (priority ${num(j.priority)})</dd>
    <dt>GPUs</dt><dd>${fmt(num(j.gpus))} = ${num(j.num_tasks)} task(s) &times; ${num(j.gpus_per_task)}</dd>
    <dt>command</dt><dd><code>${esc((j.command || []).join(" ")) || "&ndash;"}</code></dd>
    <dt>submitted</dt><dd>${submit ? clock(submit) : "&ndash;"}${start ? `, waited ${dur(start - submit)}` : j.state === "pending" ? `, waiting ${dur(now - submit)}` : ""}</dd>
    <dt>ran</dt><dd>${start ? dur((end || now) - start) + (num(j.duration_s) ? ` of ${dur(1000 * num(j.duration_s))}` : "") : "&ndash;"}</dd>
    ${j.state === "pending" && (j.pending_reason || j.message) ? `<dt>waiting</dt><dd id=detail-why>${esc(j.pending_reason || j.message)}</dd>` : ""}
    <dt>preempted</dt><dd>${num(j.preemptions)} time(s)</dd>
    <dt>placement</dt><dd id=detail-placement>${per.size ? `${per.size} node(s) in ${ui.fabric ? "" : leaves.size + " leaf/leaves: "}${place}` : "&ndash;"}</dd>
    ${lent.size ? `<dt>remote GPUs</dt><dd id=detail-remote title="host &larr; node lending GPUs through its GPU server">${remote}</dd>` : ""}
  </dl>`;
}

// Stacked areas of GPUs in use per tenant, down GPUs on top, the pool size dashed, and the queue
// length on its own scale (right axis).
function renderChart() {
  const s = ui.history;
  const W = 1000, H = 220, L = 44, R = 40, T = 8, B = 22;
  if (s.length < 2) {
    $("chart").innerHTML = `<svg viewBox="0 0 ${W} ${H}"><text class=axis x="${L}" y="${H / 2}">collecting samples&hellip;</text></svg>`;
    return;
  }
  const t0 = s[0].t, t1 = s[s.length - 1].t;
  // The y axis is the pool size, rounded up to a readable step (allocated GPUs on down nodes are
  // counted in both areas, so the stack may briefly exceed the pool: it is clipped, not rescaled).
  const top = Math.max(1, ...s.map((x) => num(x.total)));
  const step = niceStep(top / 4);
  const ymax = Math.ceil(top / step) * step;
  const pmax = Math.max(1, ...s.map((x) => num(x.pending)));
  const X = (t) => L + ((W - L - R) * (t - t0)) / Math.max(1, t1 - t0);
  const Y = (v) => T + (H - T - B) * (1 - Math.min(v, ymax) / ymax);
  const YP = (v) => T + (H - T - B) * (1 - v / pmax);
  const tenants = [...new Set(s.flatMap((x) => Object.keys(x.tenants || {})))].sort();
  let h = "";
  for (let v = 0; v <= ymax; v += step) {
    h += `<line class=gridline x1="${L}" x2="${W - R}" y1="${Y(v)}" y2="${Y(v)}"/>` +
         `<text class=axis x="${L - 6}" y="${Y(v) + 3}" text-anchor=end>${fmt(Math.round(v))}</text>`;
  }
  const base = s.map(() => 0);
  const area = (vals, fill, cls, title) => {
    let top = "", bot = "";
    s.forEach((x, i) => { top += `${X(x.t).toFixed(1)},${Y(base[i] + vals[i]).toFixed(1)} `; });
    for (let i = s.length - 1; i >= 0; i--) bot += `${X(s[i].t).toFixed(1)},${Y(base[i]).toFixed(1)} `;
    vals.forEach((v, i) => { base[i] += v; });
    return `<polygon${cls ? ` class=${cls}` : ""} points="${top}${bot}"${fill ? ` style="fill:${fill};opacity:.85"` : ""}><title>${esc(title)}</title></polygon>`;
  };
  for (const t of tenants) h += area(s.map((x) => num((x.tenants || {})[t])), colorOf(t), "", t);
  h += area(s.map((x) => num(x.down)), "", "down-area", "down / off");
  h += `<polyline class=total points="${s.map((x) => `${X(x.t).toFixed(1)},${Y(num(x.total)).toFixed(1)}`).join(" ")}"><title>pool size</title></polyline>`;
  h += `<polyline class=pending points="${s.map((x) => `${X(x.t).toFixed(1)},${YP(num(x.pending)).toFixed(1)}`).join(" ")}"><title>queued jobs</title></polyline>`;
  h += `<text class=axis x="${W - R + 6}" y="${YP(pmax) + 8}">${fmt(pmax)}</text><text class=axis x="${W - R + 6}" y="${YP(0)}">0</text>`;
  const span = t1 - t0;
  for (let i = 0; i <= 5; i++) {
    const t = t0 + (span * i) / 5;
    h += `<text class=axis x="${X(t)}" y="${H - 6}" text-anchor=middle>${clock(t)}</text>`;
  }
  $("chart").innerHTML = `<svg viewBox="0 0 ${W} ${H}">${h}</svg>`;
  const last = s[s.length - 1];
  setText("chart-range", `last ${dur(span)}, ${s.length} samples; now ${pct(num(last.allocated), num(last.total))} allocated`);
  let lg = tenants.map((t) => `<span><i style="background:${colorOf(t)}"></i>${esc(t)}</span>`).join("");
  lg += "<span><i style='background:rgba(184,67,74,.55)'></i>down / off</span><span><i style='background:#d8e0ea'></i>pool (dashed)</span>" +
        "<span><i style='background:var(--warn)'></i>queued jobs (right axis)</span>";
  $("chart-legend").innerHTML = lg;
}

// The smallest readable step >= x: 1, 2, 2.5 or 5 times a power of ten, or a power of two (GPU
// pools are often 2^n GPUs, so 2,048 gets ticks at 512, not at 1,000 up to 3,000).
function niceStep(x) {
  x = Math.max(x, 1);
  const p = Math.pow(10, Math.floor(Math.log10(x)));
  const c = [1, 2, 2.5, 5, 10].map((k) => k * p).concat([Math.pow(2, Math.ceil(Math.log2(x)))]);
  return Math.min(...c.filter((v) => v >= x));
}

function showError(msg) {
  const e = $("error");
  e.textContent = msg;
  e.hidden = !msg;
}

function render() {
  if (!ui.state) return;
  const now = Date.now();
  const m = derive(ui.state);
  renderKpis(m);
  renderModels(m);
  renderTenants(m);
  renderFabric(m);
  renderJobs(m, now);
  renderDetail(m, now);
  renderChart();
}

// ---- Polling ----

async function refresh() {
  try {
    const since = ui.history.length ? ui.history[ui.history.length - 1].t : 0;
    const [st, hist] = await Promise.all([getJson("/api/state"), getJson("/api/history?since=" + since)]);
    ui.state = st;
    ui.historyCap = num(hist.capacity) || ui.historyCap;
    ui.history.push(...(hist.samples || []));
    if (ui.history.length > ui.historyCap) ui.history.splice(0, ui.history.length - ui.historyCap);
    await refreshFabric();
    const c = $("conn");
    c.textContent = "live";
    c.className = "conn ok";
    setText("updated", "updated " + clock(Date.now()));
    showError("");
    render();
    document.body.dataset.loaded = "1";
  } catch (e) {
    const c = $("conn");
    const denied = e.status === 401 || e.status === 403;
    c.textContent = denied ? "not authorized" : "controller unreachable";
    c.className = "conn bad";
    document.body.dataset.denied = denied ? String(e.status) : "";
    showError(denied
      ? "The controller refused this page's token: " + e.message +
        ". Open the dashboard as http://HOST:PORT/#token=TOKEN (an admin or tenant token)."
      : "Cannot read the controller: " + e.message + " (retrying)");
  }
}

// /api/fabric (404 when the controller has no --fabric: then the grouped view is drawn). Each
// poll reads the loaded and broken links; the whole topology (?links=all, thousands of links)
// only every 30 s or when the routing generation changes.
async function refreshFabric() {
  if (ui.fabric === null && Date.now() - ui.fabricChecked < 30000) return;  // none, recently
  try {
    const stale = !ui.fabricTopo || Date.now() - ui.fabricChecked > 30000;
    const f = await getJson(stale ? "/api/fabric?links=all" : "/api/fabric");
    if (!stale && num(f.generation) !== num(ui.fabric.generation)) {
      ui.fabricTopo = null;
      return refreshFabric();
    }
    if (stale) { ui.fabricTopo = f; ui.fabricChecked = Date.now(); }
    ui.fabric = f;
  } catch (e) {
    ui.fabric = null;
    ui.fabricTopo = null;
    ui.fabricChecked = Date.now();
    if (e.status !== 404) console.warn(e.message);
  }
}

function schedule() {
  clearTimeout(ui.timer);
  const ms = Number($("refresh").value);
  if (ms > 0) ui.timer = setTimeout(async () => { await refresh(); schedule(); }, ms);
}

function select(id) {
  ui.selected = id && id !== ui.selected ? id : null;
  history.replaceState(null, "", ui.selected ? "#job=" + encodeURIComponent(ui.selected) : "#");
  render();
}

function init() {
  takeTokenFromUrl();
  const m = /job=([^&]+)/.exec(location.hash);
  if (m) ui.selected = decodeURIComponent(m[1]);
  $("jobs").addEventListener("click", (e) => {
    const tr = e.target.closest("tr[data-job]");
    if (tr) select(tr.dataset.job);
  });
  $("fabric").addEventListener("click", (e) => {
    const r = e.target.closest("[data-job]");
    select(r ? r.dataset.job : null);
  });
  $("tabs").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-tab]");
    if (!b) return;
    ui.tab = b.dataset.tab;
    for (const x of $("tabs").children) x.classList.toggle("on", x === b);
    render();
  });
  $("filter").addEventListener("input", (e) => { ui.filter = e.target.value.trim(); render(); });
  $("refresh").addEventListener("change", () => { refresh(); schedule(); });
  refresh().then(schedule);
}

init();
