// noderag page: ask, stream the answer, list passages, draw the retrieved subgraph (own SVG force layout).
// Everything is in this file: no CDN, no library, so the page works offline.
"use strict";

const TYPES = ["T", "S", "N", "R", "A", "H", "O"];
const TYPE_NAMES = { T: "text chunk", S: "semantic unit", N: "entity", R: "relationship", A: "attribute",
                     H: "high-level", O: "overview" };
const COLORS = Object.fromEntries(TYPES.map(t =>
  [t, getComputedStyle(document.documentElement).getPropertyValue("--" + t).trim()]));
const SVGNS = "http://www.w3.org/2000/svg";
const $ = id => document.getElementById(id);

const state = { llm: false, key: localStorage.getItem("noderag-api-key") || "", graph: null, hidden: new Set(),
                view: null, selected: null };

function el(tag, attrs = {}, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function svg(tag, attrs = {}) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}
function short(s, n) { s = (s || "").replace(/\s+/g, " ").trim(); return s.length > n ? s.slice(0, n - 1) + "…" : s; }
function baseName(p) { return /[\\/]/.test(p) ? p.split(/[\\/]/).pop() : p; }

function headers(json) {
  const h = json ? { "Content-Type": "application/json" } : {};
  if (state.key) h["Authorization"] = "Bearer " + state.key;
  return h;
}
async function api(path, body) {
  const r = await fetch(path, body === undefined ? { headers: headers(false) }
                              : { method: "POST", headers: headers(true), body: JSON.stringify(body) });
  if (r.status === 401) { $("keybox").hidden = false; throw new Error("this server needs an API key: enter it above"); }
  if (!r.ok) {
    let msg = "HTTP " + r.status;
    try { msg = (await r.json()).error || msg; } catch (e) { /* not JSON */ }
    throw new Error(msg);
  }
  return r;
}
function setStatus(s) { $("status").textContent = s; }

// ---------------------------------------------------------------- answer + passages
function showAnswer(text, cls) {
  const a = $("answer");
  a.className = "answer" + (cls ? " " + cls : "");
  a.textContent = text;
}
function showCitations(ids, caption = "cites:") {
  const box = $("citations");
  box.replaceChildren();
  if (!ids || !ids.length) return;
  box.append(el("span", { class: "muted" }, caption));
  for (const id of ids) {
    const n = state.graph && state.graph.byId.get(id);
    const chip = el("span", { class: "chip", "data-node": id, title: n ? short(n.text, 200) : "" });
    const dot = el("i"); dot.style.background = n ? COLORS[n.type] : "#999";
    chip.append(dot, document.createTextNode((n ? n.type + " " : "") + id));
    chip.onclick = () => selectNode(id);
    box.append(chip);
  }
}
function showPassages(res) {
  const ol = $("passages");
  ol.replaceChildren();
  res.passages.forEach((p) => {
    const li = el("li", { "data-node": p.node_id });
    li.append(el("span", { class: "label", title: p.id }, p.title || baseName(p.id)),
              el("span", { class: "pid" }, p.title ? baseName(p.id) : ""),
              el("span", { class: "score" }, "score " + Number(p.score).toFixed(3)),
              el("div", { class: "text" }, p.text || ""));
    li.onclick = () => { li.classList.toggle("open"); selectNode(p.node_id); };
    ol.append(li);
  });
  $("ctxinfo").textContent = `(${res.passages.length} ranked; context ${res.context_tokens} tokens from ` +
                             `${res.context_node_ids.length} nodes)`;
}

// ---------------------------------------------------------------- graph layout
function hash(i) { let x = (i + 1) * 2654435761 >>> 0; x ^= x >>> 13; x = Math.imul(x, 1597334677) >>> 0; return x / 4294967296; }

// Fruchterman–Reingold with a grid-free O(n^2) repulsion: 200 nodes x 300 steps is a few ms.
function layout(nodes, edges, W, H) {
  const n = nodes.length, k = Math.sqrt((W * H) / Math.max(n, 1)) * 0.75;
  const x = new Float64Array(n), y = new Float64Array(n), dx = new Float64Array(n), dy = new Float64Array(n);
  const ti = nodes.map(d => TYPES.indexOf(d.type));
  for (let i = 0; i < n; i++) {  // deterministic start: a sector per type, jittered by a hash of the id
    const a = (ti[i] + hash(nodes[i].id)) / TYPES.length * 2 * Math.PI, r = 0.25 + 0.2 * hash(nodes[i].id * 7 + 3);
    x[i] = W / 2 + Math.cos(a) * r * W; y[i] = H / 2 + Math.sin(a) * r * H;
  }
  const idx = new Map(nodes.map((d, i) => [d.id, i]));
  const E = edges.map(([u, v]) => [idx.get(u), idx.get(v)]).filter(([a, b]) => a !== undefined && b !== undefined);
  const deg = new Float64Array(n); for (const [a, b] of E) { deg[a]++; deg[b]++; }
  let temp = W / 8;
  const steps = 320;
  for (let s = 0; s < steps; s++) {
    dx.fill(0); dy.fill(0);
    for (let i = 0; i < n; i++) for (let j = i + 1; j < n; j++) {
      let ex = x[i] - x[j], ey = y[i] - y[j]; let d2 = ex * ex + ey * ey;
      if (d2 < 0.01) { ex = hash(i + s) - 0.5; ey = hash(j + s) - 0.5; d2 = 0.01; }
      const f = (k * k) / d2;
      dx[i] += ex * f; dy[i] += ey * f; dx[j] -= ex * f; dy[j] -= ey * f;
    }
    for (const [a, b] of E) {
      const ex = x[a] - x[b], ey = y[a] - y[b], d = Math.sqrt(ex * ex + ey * ey) + 1e-9;
      const f = d / k / Math.sqrt(1 + Math.min(deg[a], deg[b]));  // hubs pull less: fewer hairballs
      dx[a] -= ex * f; dy[a] -= ey * f; dx[b] += ex * f; dy[b] += ey * f;
    }
    for (let i = 0; i < n; i++) {  // gravity keeps components on screen
      dx[i] += (W / 2 - x[i]) * 0.02 * k / 10; dy[i] += (H / 2 - y[i]) * 0.02 * k / 10;
      const d = Math.sqrt(dx[i] * dx[i] + dy[i] * dy[i]) + 1e-9, m = Math.min(d, temp);
      x[i] += dx[i] / d * m; y[i] += dy[i] / d * m;
    }
    temp = Math.max(0.5, temp * 0.985);
  }
  return { x, y, E };
}

// Labels: seeds first, then entities and overviews, by score; a label that would overlap one already placed
// is left out (its node still has a tooltip), so 200 nodes stay readable.
function placeLabels(nodes, x, y, seeds, maxLabels) {
  const order = nodes.map((d, i) => i).filter(i => seeds.has(nodes[i].id) || nodes[i].type === "N" || nodes[i].type === "O")
    .sort((a, b) => (seeds.has(nodes[b].id) - seeds.has(nodes[a].id)) || (nodes[b].score - nodes[a].score) || (nodes[a].id - nodes[b].id));
  const boxes = [], out = [];
  for (const i of order) {
    if (out.length >= maxLabels) break;
    const text = short(nodes[i].text, seeds.has(nodes[i].id) ? 26 : 18);
    const b = { x0: x[i] + 7, y0: y[i] - 8, x1: x[i] + 9 + text.length * 6.1, y1: y[i] + 5 };
    if (boxes.some(o => b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1)) continue;
    boxes.push(b);
    out.push([i, text]);
  }
  return out;
}

function drawGraph(res) {
  const g = $("graph");
  g.replaceChildren();
  const nodes = res.nodes, edges = (res.explain && res.explain.edges) || [];
  const seeds = new Set((res.explain && res.explain.seeds) || nodes.filter(n => n.origin === "entry" || n.origin === "name").map(n => n.id));
  // the drawing uses the panel's own aspect ratio, one SVG unit per pixel at the panel's width
  const W = Math.max(400, g.clientWidth || 800), H = Math.max(300, g.clientHeight || 560);
  const { x, y, E } = layout(nodes, edges, W, H);
  // stretch the layout to fill the panel (positions only: circles and text keep their size)
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (let i = 0; i < nodes.length; i++) { x0 = Math.min(x0, x[i]); x1 = Math.max(x1, x[i]); y0 = Math.min(y0, y[i]); y1 = Math.max(y1, y[i]); }
  const padL = 16, padR = 120, padY = 16;  // room on the right for the labels of the rightmost nodes
  const sx = (W - padL - padR) / Math.max(x1 - x0, 1), sy = (H - 2 * padY) / Math.max(y1 - y0, 1);
  for (let i = 0; i < nodes.length; i++) { x[i] = padL + (x[i] - x0) * sx; y[i] = padY + (y[i] - y0) * sy; }
  state.view = { x: 0, y: 0, w: W, h: H };
  applyView();
  const gl = svg("g", { id: "edges" }), gn = svg("g", { id: "nodes" }), gt = svg("g", { id: "labels" });
  const byId = new Map(), lines = [];
  for (const [a, b] of E) {
    const ln = svg("line", { x1: x[a].toFixed(1), y1: y[a].toFixed(1), x2: x[b].toFixed(1), y2: y[b].toFixed(1),
                             "data-u": nodes[a].id, "data-v": nodes[b].id });
    gl.append(ln); lines.push(ln);
  }
  const small = nodes.length > 120 ? 0.8 : 1;
  nodes.forEach((nd, i) => {
    const seed = seeds.has(nd.id);
    const c = svg("circle", { cx: x[i].toFixed(1), cy: y[i].toFixed(1), r: ((seed ? 7 : nd.type === "T" ? 6 : 4.6) * small).toFixed(1),
                              fill: COLORS[nd.type], "data-id": nd.id, "data-type": nd.type, class: seed ? "seed" : "" });
    const t = svg("title"); t.textContent = `${nd.type} ${nd.id} (${nd.origin}${seed ? ", seed" : ""}): ${short(nd.text, 160)}`;
    c.append(t);
    c.addEventListener("click", ev => { ev.stopPropagation(); selectNode(nd.id); });
    gn.append(c);
    byId.set(nd.id, { ...nd, i, circle: c, label: null, seed });
  });
  for (const [i, text] of placeLabels(nodes, x, y, seeds, nodes.length > 120 ? 30 : 45)) {
    const label = svg("text", { x: (x[i] + 8).toFixed(1), y: (y[i] + 3.5).toFixed(1), "data-id": nodes[i].id });
    label.textContent = text;
    gt.append(label);
    byId.get(nodes[i].id).label = label;
  }
  g.append(gl, gn, gt);
  state.graph = { byId, lines, nodes };
  drawLegend(nodes, seeds);
  const types = new Set(nodes.map(n => n.type));
  $("graphinfo").textContent = `(${nodes.length} nodes of ${types.size} types, ${E.length} edges, ${seeds.size} seeds)`;
}

function drawLegend(nodes, seeds) {
  const lg = $("legend");
  lg.replaceChildren();
  const count = {};
  for (const n of nodes) count[n.type] = (count[n.type] || 0) + 1;
  for (const t of TYPES) {
    const lab = el("label", { title: "show/hide " + TYPE_NAMES[t] + " nodes", "data-type": t });
    const cb = el("input", { type: "checkbox" }); cb.checked = !state.hidden.has(t);
    cb.onchange = () => { cb.checked ? state.hidden.delete(t) : state.hidden.add(t); applyFilter(); };
    const dot = el("i"); dot.style.background = COLORS[t];
    lab.append(cb, dot, document.createTextNode(`${t} ${TYPE_NAMES[t]} (${count[t] || 0})`));
    lg.append(lab);
  }
  const s = el("span", { class: "seed" }); s.append(el("i"), document.createTextNode(` seed (${seeds.size})`));
  lg.append(s);
  applyFilter();
}

function applyFilter() {
  if (!state.graph) return;
  for (const n of state.graph.byId.values()) {
    const off = state.hidden.has(n.type);
    n.circle.style.display = off ? "none" : "";
    if (n.label) n.label.style.display = off ? "none" : "";
  }
  for (const ln of state.graph.lines) {
    const u = state.graph.byId.get(+ln.dataset.u), v = state.graph.byId.get(+ln.dataset.v);
    ln.style.display = state.hidden.has(u.type) || state.hidden.has(v.type) ? "none" : "";
  }
}

function applyView() {
  const v = state.view;
  $("graph").setAttribute("viewBox", `${v.x.toFixed(1)} ${v.y.toFixed(1)} ${v.w.toFixed(1)} ${v.h.toFixed(1)}`);
}

// zoom with the wheel (around the pointer), pan by dragging
(function interact() {
  const g = $("graph");
  g.addEventListener("wheel", ev => {
    if (!state.view) return;
    ev.preventDefault();
    const r = g.getBoundingClientRect(), v = state.view, f = ev.deltaY > 0 ? 1.15 : 1 / 1.15;
    const px = v.x + (ev.clientX - r.left) / r.width * v.w, py = v.y + (ev.clientY - r.top) / r.height * v.h;
    state.view = { x: px - (px - v.x) * f, y: py - (py - v.y) * f, w: v.w * f, h: v.h * f };
    applyView();
  }, { passive: false });
  let drag = null;
  g.addEventListener("mousedown", ev => { if (state.view) drag = { x: ev.clientX, y: ev.clientY, v: { ...state.view } }; });
  window.addEventListener("mousemove", ev => {
    if (!drag) return;
    const r = g.getBoundingClientRect();
    state.view = { ...drag.v, x: drag.v.x - (ev.clientX - drag.x) / r.width * drag.v.w,
                   y: drag.v.y - (ev.clientY - drag.y) / r.height * drag.v.h };
    applyView();
  });
  window.addEventListener("mouseup", () => { drag = null; });
})();

// ---------------------------------------------------------------- node details
async function selectNode(id) {
  state.selected = id;
  if (state.graph) {
    const nb = new Set([id]);
    for (const ln of state.graph.lines) {
      const on = +ln.dataset.u === id || +ln.dataset.v === id;
      ln.classList.toggle("hl", on);
      if (on) { nb.add(+ln.dataset.u); nb.add(+ln.dataset.v); }
    }
    for (const n of state.graph.byId.values()) {
      n.circle.classList.toggle("sel", n.id === id);
      n.circle.classList.toggle("dim", !nb.has(n.id));
      if (n.label) n.label.classList.toggle("dim", !nb.has(n.id));
    }
  }
  const box = $("detail");
  box.className = "";
  box.textContent = "loading node " + id + " …";
  try {
    const d = await (await api("/nodes/" + id)).json();
    if (state.selected !== id) return;
    box.replaceChildren();
    const badge = el("span", { class: "type" }, d.type + " · " + TYPE_NAMES[d.type]); badge.style.background = COLORS[d.type];
    box.append(badge, el("b", {}, "node " + d.id + (d.active ? "" : " (retired)")));
    if (d.name && d.name !== d.text) box.append(el("div", {}, "name: " + d.name));
    box.append(el("p", { class: "text" }, d.text));
    if (d.source) {
      box.append(el("div", {}, "source passage: " + (d.source.title ? d.source.title + " — " : "") + baseName(d.source.passage) +
                    " (chunk " + d.source.chunk_id + ")"));
      if (d.source.chunk_id !== d.id) box.append(el("div", { class: "src" }, short(d.source.text, 1200)));
    }
    if (d.neighbours.length) {
      box.append(el("div", { style: "margin-top:6px" }, `neighbours (${d.neighbour_count}${d.neighbour_count > d.neighbours.length ? ", first " + d.neighbours.length : ""}):`));
      const nbs = el("div", { class: "nbs" });
      for (const nb of d.neighbours) {
        const chip = el("span", { class: "chip", title: nb.label });
        const dot = el("i"); dot.style.background = COLORS[nb.type];
        chip.append(dot, document.createTextNode(`${nb.type} ${short(nb.label, 32)}`));
        chip.onclick = () => selectNode(nb.id);
        nbs.append(chip);
      }
      box.append(nbs);
    }
  } catch (e) {
    box.className = "empty";
    box.textContent = "could not load node " + id + ": " + e.message;
  }
}

// ---------------------------------------------------------------- asking
function showRetrieval(res) {
  showPassages(res);
  drawGraph(res);
}

async function* sseEvents(response) {
  const reader = response.body.getReader(), dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut); buf = buf.slice(cut + 2);
      let event = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).trim();
      }
      yield { event, data: data ? JSON.parse(data) : null };
    }
  }
}

async function ask(question) {
  document.body.dataset.state = "busy";
  $("go").disabled = true;
  setStatus("retrieving …");
  $("citations").replaceChildren();
  const t0 = performance.now();
  try {
    if (state.llm) {
      showAnswer("", "");
      const r = await api("/answer", { question, k: 10, explain: true, stream: true });
      let text = "";
      for await (const ev of sseEvents(r)) {
        if (ev.event === "retrieval") { showRetrieval(ev.data); setStatus("answering …"); }
        else if (ev.event === "token") { text += ev.data.text; showAnswer(text, ""); }
        else if (ev.event === "answer") {
          if (ev.data.error) showAnswer("No answer: " + ev.data.error, "error");
          else { showAnswer(ev.data.answer, ""); showCitations(ev.data.cited_ids); }
        } else if (ev.event === "error") showAnswer(ev.data.error, "error");
      }
    } else {
      const res = await (await api("/retrieve", { question, k: 10, explain: true })).json();
      showRetrieval(res);
      showAnswer("This server has no LLM configured, so only retrieval is shown (start it with --llm SPEC for " +
                 "answers). The context below would be the LLM's input.", "note");
      showCitations(res.context_node_ids.slice(0, 12), "context nodes:");
    }
    setStatus(`done in ${((performance.now() - t0) / 1000).toFixed(2)} s`);
    document.body.dataset.state = "done";
  } catch (e) {
    showAnswer(e.message, "error");
    setStatus("error");
    document.body.dataset.state = "error";
  } finally {
    $("go").disabled = false;
  }
}

async function health() {
  try {
    const h = await (await api("/health")).json();
    state.llm = !!h.llm;
    setStatus(`${h.nodes.toLocaleString()} nodes · ${h.llm ? "LLM answers" : "retrieval only"}`);
  } catch (e) { setStatus(e.message); }
}

$("apikey").value = state.key;
$("apikey").addEventListener("change", () => {
  state.key = $("apikey").value.trim();
  localStorage.setItem("noderag-api-key", state.key);
  health();
});
$("ask").addEventListener("submit", ev => {
  ev.preventDefault();
  const q = $("question").value.trim();
  if (q) ask(q);
});
$("graph").addEventListener("click", () => { /* click on the background: keep the selection */ });
const ready = health();
window.noderag = { ask, ready, state };  // used by the browser test
