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
  fabric: null,         // last /api/fabric, or null when the controller has none
  fabricChecked: 0,     // ms of the last /api/fabric attempt
  history: [],          // samples, oldest first
  historyCap: 3600,
  tab: "active",
  filter: "",
  selected: null,       // job id
  timer: null,
  tenantColor: new Map(),
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

async function getJson(url) {
  const r = await fetch(url, {cache: "no-store"});
  if (!r.ok) {
    const e = new Error(url + ": HTTP " + r.status);
    e.status = r.status;
    throw e;
  }
  return r.json();
}

// ---- Model: derive everything the views need from one /api/state ----

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
    }
  }
  const m = {nodes, jobs, tenants, gpuOwner, jobsById, total: 0, alloc: 0, down: 0, downNodes: 0,
             running: 0, pending: 0, pendingGpus: 0, finished: 0, models: new Map()};
  for (const n of nodes) {
    const g = num(n.gpus), a = num(n.gpus_allocated), isDown = n.state === "down";
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
  for (const n of nodes) if (n.state !== "down") m.idle += Math.max(0, num(n.gpus) - num(n.gpus_allocated));
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
  setText("kpi-down-nodes", m.downNodes ? fmt(m.downNodes) + " nodes missed heartbeats" : "all nodes heartbeating");
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
  const g = num(n.gpus), isDown = n.state === "down";
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
  let h = `<rect class=spine x="0" y="2" width="${width}" height="16" rx="3"/>` +
          `<text class=sw-label x="8" y="14">spine layer (no fabric data: uniform tree of ${LEAF_SIZE}-node leaves, as the controller places)</text>`;
  leaves.forEach((leaf, li) => {
    const x = (li % perRow) * (leafW + gap), y = top + Math.floor(li / perRow) * bandH + 16;
    const hit = leaf.some((n) => selNodes.has(n.name));
    h += `<line class=uplink x1="${x + leafW / 2}" y1="18" x2="${x + leafW / 2}" y2="${y}"/>`;
    h += `<rect class="leaf-box${hit ? " hit" : ""}" x="${x}" y="${y}" width="${leafW}" height="${leafH}" rx="4"/>`;
    h += `<text class=leaf-label x="${x + pad}" y="${y + 12}">leaf ${li}</text>`;
    leaf.forEach((n, ni) => { h += nodeCells(m, n, x + pad, y + 18 + ni * rowH, cell, rowH); });
    const used = leaf.reduce((a, n) => a + num(n.gpus_allocated), 0);
    const all = leaf.reduce((a, n) => a + num(n.gpus), 0);
    h += `<text class=leaf-label x="${x + pad}" y="${y + leafH - 6}">${used}/${all}</text>`;
  });
  return {svg: `<svg viewBox="0 -1 ${width} ${height}" preserveAspectRatio="xMinYMin meet">${h}</svg>`,
          source: `${fmt(m.nodes.length)} nodes in ${leaves.length} leaves (controller grouping)`};
}

// With /api/fabric: switches in layers (top = farthest from hosts), hosts under their leaf, links
// coloured by state and load. The expected shape is documented in docs/control-plane.md:
// {switches:[{name, level?}], hosts:[{name, node?, switch?}], links:[{a, b, state?, load?}],
//  affected_jobs?:[id]}. Anything missing degrades to the grouped view.
function renderRealFabric(m, fab) {
  const switches = fab.switches || [], hosts = fab.hosts || [], links = fab.links || [];
  if (!switches.length) return null;
  const swName = new Set(switches.map((s) => s.name));
  const hostOf = new Map(hosts.map((h) => [h.name, h]));
  // Level: given, or 0 for switches with hosts attached, then BFS upwards.
  const level = new Map();
  for (const s of switches) if (s.level !== undefined) level.set(s.name, num(s.level));
  const adj = new Map();
  for (const l of links) {
    if (!adj.has(l.a)) adj.set(l.a, []);
    if (!adj.has(l.b)) adj.set(l.b, []);
    adj.get(l.a).push(l.b); adj.get(l.b).push(l.a);
  }
  const leafOfHost = new Map();
  for (const h of hosts) {
    const sw = h.switch || (adj.get(h.name) || []).find((x) => swName.has(x));
    if (sw) leafOfHost.set(h.name, sw);
  }
  if (!level.size) {
    let frontier = [...new Set(leafOfHost.values())];
    frontier.forEach((s) => level.set(s, 0));
    while (frontier.length) {
      const next = [];
      for (const s of frontier) for (const x of adj.get(s) || []) {
        if (swName.has(x) && !level.has(x)) { level.set(x, level.get(s) + 1); next.push(x); }
      }
      frontier = next;
    }
  }
  for (const s of switches) if (!level.has(s.name)) level.set(s.name, 0);
  const maxLevel = Math.max(...level.values());
  const byLevel = [];
  for (let i = 0; i <= maxLevel; i++) byLevel.push([]);
  for (const s of switches) byLevel[level.get(s.name)].push(s.name);
  byLevel.forEach((a) => a.sort());
  const width = 1000, swH = 14, layerGap = 60;
  const pos = new Map();
  for (let lv = maxLevel; lv >= 0; lv--) {
    const names = byLevel[lv], y = (maxLevel - lv) * layerGap + 4;
    const w = width / Math.max(1, names.length);
    names.forEach((n, i) => pos.set(n, {x: i * w + w / 2, y, w: Math.max(2, Math.min(60, w - 2))}));
  }
  // Hosts (their GPU cells) in a strip under each leaf, in the leaf's order.
  const nodeByName = new Map(m.nodes.map((n) => [n.name, n]));
  const leaves = byLevel[0];
  const hostsByLeaf = new Map(leaves.map((l) => [l, []]));
  for (const [h, sw] of leafOfHost) if (hostsByLeaf.has(sw)) hostsByLeaf.get(sw).push(h);
  const cell = Math.max(2, Math.min(8, Math.floor(width / Math.max(1, leaves.length) / 9)));
  const hostTop = maxLevel * layerGap + 4 + swH + 30;
  let maxHosts = 0;
  const selNodes = selectedNodes(m);
  let cells = "";
  leaves.forEach((leaf) => {
    const p = pos.get(leaf), list = hostsByLeaf.get(leaf).sort();
    maxHosts = Math.max(maxHosts, list.length);
    list.forEach((h, i) => {
      const node = nodeByName.get((hostOf.get(h) || {}).node || h);
      const x = p.x - (8 * cell) / 2, y = hostTop + i * cell;
      if (node) cells += nodeCells(m, node, x, y, cell);
      else cells += `<rect class="gpu idle" x="${x}" y="${y}" width="${8 * cell - 1}" height="${cell - 1}"><title>${esc(h)} (not a registered node)</title></rect>`;
    });
  });
  let lines = "";
  for (const l of links) {
    const a = pos.get(l.a), b = pos.get(l.b);
    if (!a || !b) continue;  // host links are drawn as the strip under the leaf
    const down = l.state && l.state !== "up" && l.state !== "active";
    const load = Math.max(0, Math.min(1, Number(l.load || 0)));
    const color = down ? "#ff4d57" : `hsl(${200 - 200 * load}, 70%, ${38 + 20 * load}%)`;
    lines += `<line x1="${a.x}" y1="${a.y + swH}" x2="${b.x}" y2="${b.y}" stroke="${color}" ` +
             `stroke-width="${down ? 2 : 0.6 + 1.6 * load}"${down ? ' stroke-dasharray="4 3"' : ""}>` +
             `<title>${esc(l.a)} - ${esc(l.b)}: ${esc(l.state || "up")}, load ${(load * 100).toFixed(0)}%</title></line>`;
  }
  let sws = "";
  for (const [name, p] of pos) {
    const hit = leafOfHostHit(name, hostsByLeaf, selNodes, hostOf);
    sws += `<rect class="spine${hit ? " hit" : ""}" x="${p.x - p.w / 2}" y="${p.y}" width="${p.w}" height="${swH}" rx="2"` +
           `${hit ? ' style="stroke:#fff"' : ""}><title>${esc(name)}</title></rect>`;
  }
  const height = hostTop + maxHosts * cell + 6;
  const affected = (fab.affected_jobs || []).length;
  return {svg: `<svg viewBox="0 0 ${width} ${height}" preserveAspectRatio="xMinYMin meet">${lines}${sws}${cells}</svg>`,
          source: `${fmt(switches.length)} switches, ${fmt(hosts.length)} hosts, ${fmt(links.length)} links (/api/fabric)` +
                  (affected ? ` · ${affected} jobs affected by failures: ${fab.affected_jobs.slice(0, 5).map(esc).join(" ")}` : "")};
}

function leafOfHostHit(sw, hostsByLeaf, selNodes, hostOf) {
  const list = hostsByLeaf.get(sw);
  return !!list && list.some((h) => selNodes.has((hostOf.get(h) || {}).node || h));
}

function selectedNodes(m) {
  const j = ui.selected && m.jobsById.get(ui.selected);
  return new Set(j ? (j.allocations || []).map((a) => a.node) : []);
}

function renderFabric(m) {
  let r = null;
  if (ui.fabric) {
    try { r = renderRealFabric(m, ui.fabric); } catch (e) { showError("fabric view: " + e.message); }
  }
  if (!r) r = renderGroupedFabric(m);
  const f = $("fabric");
  f.innerHTML = r.svg;
  f.classList.toggle("has-sel", !!(ui.selected && m.gpuOwner.size && [...m.gpuOwner.values()].some((j) => j.id === ui.selected)));
  $("fabric-source").innerHTML = esc(r.source);
  let lg = "<span><i style='background:var(--idle)'></i>idle</span><span><i style='background:var(--down)'></i>down / off</span>";
  for (const t of m.tenants) lg += `<span><i style="background:${colorOf(t.name)}"></i>${esc(t.name)}</span>`;
  if (ui.fabric) lg += "<span><i style='background:hsl(200,70%,38%)'></i>link idle</span><span><i style='background:hsl(0,70%,58%)'></i>link loaded</span><span><i style='background:#ff4d57'></i>link down (dashed)</span>";
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
  let h = "<thead><tr><th>job</th><th>tenant</th><th>state</th><th class=num>GPUs</th><th class=num>tasks</th>" +
          "<th class=num>prio</th><th class=num>waited</th><th class=num>ran</th><th>nodes</th><th>command</th></tr></thead><tbody>";
  for (const j of list.slice(0, MAX_ROWS)) {
    const submit = num(j.submit_ms), start = num(j.start_ms), end = num(j.end_ms);
    const waited = start ? start - submit : (j.state === "pending" ? now - submit : 0);
    const ran = start ? (end || now) - start : 0;
    const nodes = [...new Set((j.allocations || []).map((a) => a.node))];
    const nodeTxt = nodes.length > 2 ? `${nodes.slice(0, 2).join(", ")} +${nodes.length - 2}` : nodes.join(", ");
    h += `<tr id="job-${esc(j.id)}" data-job="${esc(j.id)}"${j.id === ui.selected ? " class=sel" : ""}>` +
         `<td>${esc(j.id)}</td><td><i class=swatch style="background:${colorOf(j.tenant)}"></i>${esc(j.tenant)}</td>` +
         `<td><span class="state ${esc(j.state)}">${esc(j.state)}</span></td><td class=num>${fmt(num(j.gpus))}</td>` +
         `<td class=num>${num(j.num_tasks)}&times;${num(j.gpus_per_task)}</td><td class=num>${num(j.priority)}</td>` +
         `<td class=num>${dur(waited)}</td><td class=num>${start ? dur(ran) : "&ndash;"}</td>` +
         `<td>${esc(nodeTxt)}</td><td class=cmd title="${esc((j.command || []).join(" "))}">${esc((j.command || []).join(" "))}</td></tr>`;
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
  const submit = num(j.submit_ms), start = num(j.start_ms), end = num(j.end_ms);
  $("job-detail").innerHTML = `<dl>
    <dt>job</dt><dd id=detail-id><b>${esc(j.id)}</b> <span class="state ${esc(j.state)}">${esc(j.state)}</span></dd>
    <dt>tenant</dt><dd><i class=swatch style="background:${colorOf(j.tenant)}"></i>${esc(j.tenant)} (priority ${num(j.priority)})</dd>
    <dt>GPUs</dt><dd>${fmt(num(j.gpus))} = ${num(j.num_tasks)} task(s) &times; ${num(j.gpus_per_task)}</dd>
    <dt>command</dt><dd><code>${esc((j.command || []).join(" ")) || "&ndash;"}</code></dd>
    <dt>submitted</dt><dd>${submit ? clock(submit) : "&ndash;"}${start ? `, waited ${dur(start - submit)}` : j.state === "pending" ? `, waiting ${dur(now - submit)}` : ""}</dd>
    <dt>ran</dt><dd>${start ? dur((end || now) - start) + (num(j.duration_s) ? ` of ${dur(1000 * num(j.duration_s))}` : "") : "&ndash;"}</dd>
    <dt>preempted</dt><dd>${num(j.preemptions)} time(s)</dd>
    <dt>placement</dt><dd id=detail-placement>${per.size ? `${per.size} node(s) in ${ui.fabric ? "" : leaves.size + " leaf/leaves: "}${place}` : "&ndash;"}</dd>
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
    // The fabric changes rarely: look for it every 10 s; a 404 means the controller has none.
    if (Date.now() - ui.fabricChecked > 10000) {
      ui.fabricChecked = Date.now();
      try { ui.fabric = await getJson("/api/fabric"); } catch (e) {
        ui.fabric = null;
        if (e.status !== 404) console.warn(e.message);
      }
    }
    const c = $("conn");
    c.textContent = "live";
    c.className = "conn ok";
    setText("updated", "updated " + clock(Date.now()));
    showError("");
    render();
    document.body.dataset.loaded = "1";
  } catch (e) {
    const c = $("conn");
    c.textContent = "controller unreachable";
    c.className = "conn bad";
    showError("Cannot read the controller: " + e.message + " (retrying)");
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
