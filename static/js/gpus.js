// Live GPU dashboard: one websocket (/ws/gpus/), a backfill per window, then every sample.
// A host that registers after the backfill (a "host" event, or a sample from a host we do not
// know) is asked for on the same socket and gets its own section. Memory charts stack the
// split by deployment in every window (the 1-minute series keeps it too).
// Vanilla JS on the vendored plotly.min.js; no build step.
(function () {
  "use strict";

  const PLOT_CONFIG = { showSendToCloud: false, displaylogo: false, responsive: true, displayModeBar: false };
  const MAX_POINTS = { "5m": 400, "1h": 4400, "24h": 5100, "7d": 13700 };
  const BACKOFF_MIN_MS = 500;
  const BACKOFF_MAX_MS = 8000;
  const STALE_MS = 15000;
  const HOST_RETRY_MS = 5000;
  const METRICS = [
    { key: "u", title: "Utilization (%)", range: [0, 100] },
    { key: "m", title: "Memory (MiB)" },
    { key: "T", title: "Temperature (°C)" },
    { key: "p", title: "Power (W)" },
  ];
  const TABLE_COLUMNS = [
    ["index", "GPU"], ["name", "Name"], ["fan", "Fan"], ["temperature", "Temp"],
    ["power", "Pwr: usage / cap"], ["memory", "Memory usage"], ["gpu_util", "GPU-Util"],
    ["sm_clock", "SM clock"], ["throttle", "Throttle"], ["processes", "Procs"],
  ];

  const root = document.getElementById("gpu-dashboard");
  if (!root) return;
  const statusEl = document.getElementById("ws-status");
  const state = { window: root.dataset.window || "5m", ws: null, backoffMs: BACKOFF_MIN_MS, hosts: new Map(), asked: new Map(), stopped: false };

  function el(tag, attrs, text) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(([k, v]) => node.setAttribute(k, v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function setStatus(kind, text) {
    statusEl.dataset.state = kind;
    statusEl.textContent = text;
    statusEl.className = "badge " + ({ live: "ok", connecting: "warn", reconnecting: "warn", closed: "bad" }[kind] || "");
  }

  // --- host cards -----------------------------------------------------------------------

  function hostCard(name) {
    let card = root.querySelector(`section.host[data-host="${CSS.escape(name)}"]`);
    if (!card) {
      card = el("section", { class: "card host", "data-host": name });
      const h2 = el("h2", {}, name + " ");
      h2.append(el("span", { class: "badge", "data-role": "online" }));
      card.append(h2, el("p", { class: "muted", "data-role": "summary" }));
      root.append(card);
      const empty = document.getElementById("no-hosts");
      if (empty) empty.remove();
    }
    let live = card.querySelector(".gpu-live");
    if (!live) {
      live = el("div", { class: "gpu-live" });
      card.append(live);
    }
    return card;
  }

  function setOnline(view, online, why) {
    const badge = view.card.querySelector("[data-role=online]");
    if (!badge) return;
    badge.textContent = online ? "online" : why || "offline";
    badge.className = "badge " + (online ? "ok" : "bad");
    view.card.classList.toggle("offline", !online);
  }

  function markSimulated(card, sim, note) {
    const h2 = card.querySelector("h2");
    let badge = h2.querySelector(".badge.sim");
    if (sim && !badge) {
      badge = el("span", { class: "badge sim", title: note || "" }, "simulated GPUs");
      h2.append(" ", badge);
    }
    if (!sim && badge) badge.remove();
  }

  function buildTable(view) {
    const table = el("table", { class: "grid smi", "data-role": "smi" });
    const head = el("tr");
    TABLE_COLUMNS.forEach(([, label]) => head.append(el("th", {}, label)));
    table.append(el("thead"), el("tbody"));
    table.tHead.append(head);
    return table;
  }

  function renderRows(view, rows) {
    const body = view.table.tBodies[0];
    body.replaceChildren(...rows.map((row) => {
      const tr = el("tr", { "data-gpu": String(row.index), "data-kind": row.kind || "gpu", class: "state-" + row.state });
      TABLE_COLUMNS.forEach(([key]) => {
        // the host's CPU row (kind "cpu"): "CPU" in place of its index, its utilization the CPU's
        const text = key === "index" && row.kind === "cpu" ? "CPU" : String(row[key]);
        const td = el("td", { "data-col": key }, text);
        if (key === "name" && row.simulated) td.append(" ", el("span", { class: "badge sim" }, "simulated"));
        if (key === "name" && row.state !== "ok") td.append(" ", el("span", { class: "badge bad" }, row.state));
        tr.append(td);
      });
      return tr;
    }));
  }

  // --- per-GPU charts ---------------------------------------------------------------------

  function emptyBuffer() {
    return { t: [], u: [], bw: [], m: [], T: [], p: [], mo: [], dm: {} };
  }

  function layout(title) {
    return {
      title: { text: title, font: { size: 12 }, x: 0.02 },
      margin: { l: 44, r: 8, t: 26, b: 28 }, height: 170,
      xaxis: { type: "date", showgrid: false },
      yaxis: { rangemode: "tozero" }, showlegend: false,
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
    };
  }

  function traces(gpu, key) {
    const b = gpu.buf;
    const line = (y, name, extra) => Object.assign({ type: "scatter", mode: "lines", x: b.t.slice(), y: y.slice(), name: name }, extra || {});
    if (key === "u" && gpu.cpu) return [line(b.u, "CPU")];
    if (key === "u") return [line(b.u, "GPU"), line(b.bw, "memory controller", { line: { dash: "dot" } })];
    if (key === "T") return [line(b.T, "temperature")];
    if (key === "p") return [line(b.p, "power")];
    const deps = Object.keys(b.dm).sort();
    const out = deps.map((name) => line(b.dm[name], name, { stackgroup: "mem" }));
    out.push(line(b.mo, "other", { stackgroup: "mem", line: { color: "#9ca3af" } }));
    out.push(line(b.t.map(() => gpu.mt), "total", { line: { dash: "dash", color: "#111827" } }));
    gpu.deps = deps;
    return out;
  }

  // Why a chart has nothing to draw ("" when it has): no samples in the window (the host is
  // offline, or has not sent any yet), or none of them carries this metric.
  function emptyReason(gpu, key) {
    if (!gpu.buf.t.length) return gpu.view.reason || "No samples in this window.";
    const ys = gpu.buf[key] || [];
    if (ys.every((y) => y === null || y === undefined)) {
      const metric = METRICS.find((m) => m.key === key);
      return `No ${metric.title.replace(/ \(.*\)$/, "").toLowerCase()} readings: this GPU does not report it.`;
    }
    return "";
  }

  function drawChart(gpu, key) {
    const metric = METRICS.find((m) => m.key === key);
    const chart = gpu.charts[key];
    const reason = emptyReason(gpu, key);
    if (reason) {
      if (chart.data) Plotly.purge(chart);
      chart.replaceChildren(el("div", { class: "chart-empty", "data-role": "empty" }, `${metric.title}: ${reason}`));
      chart.dataset.empty = "1";
      return null;
    }
    if (chart.dataset.empty) {
      chart.replaceChildren();
      delete chart.dataset.empty;
    }
    const lay = layout(metric.title + (gpu.sim ? " · simulated" : ""));
    if (metric.range) lay.yaxis = { range: metric.range };
    if (key === "m") lay.showlegend = false;
    return Plotly.react(gpu.charts[key], traces(gpu, key), lay, PLOT_CONFIG);
  }

  // The CPU has no temperature or power reading: its panel draws utilization and RAM only.
  function metricsOf(gpu) {
    return gpu.cpu ? METRICS.filter((m) => m.key === "u" || m.key === "m") : METRICS;
  }

  function drawAll(gpu) {
    metricsOf(gpu).forEach((m) => drawChart(gpu, m.key));
  }

  function gpuPanel(view, device, sim) {
    let gpu = view.gpus.get(device.i);
    if (gpu) return gpu;
    const cpu = device.k === "cpu";
    const panel = el("div", { class: "gpu-panel", "data-gpu": String(device.i), "data-kind": cpu ? "cpu" : "gpu" });
    const title = el("h3", {}, cpu ? `${device.name} · RAM ${device.mt} MiB` : `GPU ${device.i} · ${device.name} · ${device.mt} MiB`);
    sim = sim && !cpu; // a simulated host's CPU is real
    if (sim) title.append(" ", el("span", { class: "badge sim" }, "simulated"));
    const grid = el("div", { class: "charts" });
    const charts = {};
    (cpu ? METRICS.filter((m) => m.key === "u" || m.key === "m") : METRICS).forEach((m) => {
      charts[m.key] = el("div", { class: "chart", "data-metric": m.key });
      grid.append(charts[m.key]);
    });
    panel.append(title, grid);
    view.panels.append(panel);
    gpu = { index: device.i, mt: device.mt, sim: sim, cpu: cpu, charts: charts, buf: emptyBuffer(), deps: [], lastT: 0, resMs: 1000, view: view };
    view.gpus.set(device.i, gpu);
    return gpu;
  }

  function isGap(gpu, before, after) {
    return before && after - before > Math.max(5000, 3 * gpu.resMs);
  }

  // A stretch with no samples (the worker was down) is drawn as a break, not a straight line.
  function withGaps(gpu, t, ys) {
    const out = [];
    ys.forEach((y, i) => {
      if (i > 0 && isGap(gpu, t[i - 1], t[i])) out.push(null);
      out.push(y === undefined ? null : y);
    });
    return out;
  }

  function fillFromSeries(gpu, t, series) {
    const b = emptyBuffer();
    const stamps = [];
    t.forEach((ts, i) => {
      if (i > 0 && isGap(gpu, t[i - 1], ts)) stamps.push(t[i - 1] + 1);
      stamps.push(ts);
    });
    b.t = stamps;
    ["u", "bw", "m", "T", "p"].forEach((k) => { b[k] = withGaps(gpu, t, series[k] || t.map(() => null)); });
    b.mo = withGaps(gpu, t, series.mo || series.m || t.map(() => null));
    Object.entries(series.dm || {}).forEach(([name, ys]) => { b.dm[name] = withGaps(gpu, t, ys); });
    gpu.buf = b;
    gpu.lastT = t.length ? t[t.length - 1] : 0;
  }

  function when(ms) {
    return ms ? new Date(ms).toLocaleString() : "";
  }

  function noSamplesReason(host) {
    if (host.online) return `No samples in this window yet: the host worker sends one every ${host.res_s || 1} s.`;
    if (host.last_heartbeat_ms) return `No samples: the host has been offline since ${when(host.last_heartbeat_ms)}.`;
    return "No samples: the host has never sent any.";
  }

  // An offline host: since when, and that its charts are its last samples, not live ones.
  function offlineNote(card, host) {
    let note = card.querySelector("[data-role=offline-note]");
    if (host.online) {
      if (note) note.remove();
      return;
    }
    if (!note) {
      note = el("p", { class: "banner warn", "data-role": "offline-note", role: "status" });
      card.querySelector("[data-role=summary]").after(note);
    }
    const since = host.last_heartbeat_ms ? `Offline since ${when(host.last_heartbeat_ms)} (its last heartbeat)` : "Offline: it never sent a heartbeat";
    note.textContent = host.last_sample_ms
      ? `${since}. The charts show its last samples, up to ${when(host.last_sample_ms)}.`
      : `${since}. No samples of it are kept.`;
  }

  // --- messages -----------------------------------------------------------------------------

  function onBackfill(msg) {
    state.window = msg.w;
    root.querySelectorAll("button[data-window]").forEach((b) => b.classList.toggle("primary", b.dataset.window === msg.w));
    msg.hosts.forEach((host) => {
      state.asked.delete(host.h);
      const card = hostCard(host.h);
      const live = card.querySelector(".gpu-live");
      live.replaceChildren();
      const view = { card: card, sim: host.sim, gpus: new Map(), table: null, panels: el("div", { class: "gpu-panels" }), lastSampleMs: Date.now() };
      view.table = buildTable(view);
      live.append(view.table, view.panels);
      state.hosts.set(host.h, view);
      markSimulated(card, host.sim, host.note);
      setOnline(view, host.online);
      view.reason = host.t.length ? "" : noSamplesReason(host);
      offlineNote(card, host);
      const gpuCount = host.devices.filter((d) => d.k !== "cpu").length;
      const withCpu = host.devices.length > gpuCount ? " and its CPU" : "";
      card.querySelector("[data-role=summary]").textContent =
        `${gpuCount} GPU${gpuCount === 1 ? "" : "s"}${withCpu} · backend ${host.backend} · ${host.res_s} s per point`;
      renderRows(view, host.rows);
      host.devices.forEach((device) => {
        const gpu = gpuPanel(view, device, host.sim);
        gpu.resMs = host.res_s * 1000;
        fillFromSeries(gpu, host.t, host.g[String(device.i)] || {});
        drawAll(gpu);
      });
    });
  }

  function pushPoint(gpu, t, g) {
    const b = gpu.buf;
    const gap = isGap(gpu, gpu.lastT, t);
    const stamps = gap ? [gpu.lastT + 1, t] : [t];
    const vals = (v) => (gap ? [null, v === undefined ? null : v] : [v === undefined ? null : v]);
    const limit = MAX_POINTS[state.window];
    const keep = (arr, add) => { arr.push(...add); if (arr.length > limit) arr.splice(0, arr.length - limit); };
    keep(b.t, stamps);
    ["u", "bw", "m", "T", "p", "mo"].forEach((k) => keep(b[k], vals(g[k])));
    const dm = g.dm || {};
    Object.keys(b.dm).forEach((name) => keep(b.dm[name], vals(dm[name])));
    const fresh = Object.keys(dm).filter((name) => !(name in b.dm));
    fresh.forEach((name) => { b.dm[name] = b.t.map(() => null); b.dm[name][b.t.length - 1] = dm[name]; });
    gpu.lastT = t;
    return { stamps: stamps, vals: vals, dm: dm, redrawMemory: fresh.length > 0 };
  }

  function extend(gpu, key, stamps, ys) {
    const x = ys.map(() => stamps);
    return Plotly.extendTraces(gpu.charts[key], { x: x, y: ys }, ys.map((_, i) => i), MAX_POINTS[state.window]);
  }

  // A host we have no section for: ask the server for its backfill (once per HOST_RETRY_MS).
  function askForHost(name) {
    const ws = state.ws;
    const asked = state.asked.get(name);
    if (!ws || ws.readyState !== WebSocket.OPEN || (asked && Date.now() - asked < HOST_RETRY_MS)) return;
    state.asked.set(name, Date.now());
    ws.send(JSON.stringify({ type: "host", h: name }));
  }

  function onSample(msg) {
    const view = state.hosts.get(msg.h);
    if (!view) { askForHost(msg.h); return; }
    view.lastSampleMs = Date.now();
    if (view.reason || view.card.querySelector("[data-role=offline-note]")) { askForHost(msg.h); return; }
    setOnline(view, true);
    if (msg.rows) renderRows(view, msg.rows);
    msg.g.forEach((g) => {
      const gpu = view.gpus.get(g.i);
      if (!gpu || msg.t <= gpu.lastT) return; // already in the backfill
      if (g.mt) gpu.mt = g.mt;
      const p = pushPoint(gpu, msg.t, g);
      const drawn = (key) => !gpu.charts[key].dataset.empty || (drawChart(gpu, key), false);
      if (gpu.cpu) {
        if (drawn("u")) extend(gpu, "u", p.stamps, [p.vals(g.u)]);
      } else {
        if (drawn("u")) extend(gpu, "u", p.stamps, [p.vals(g.u), p.vals(g.bw)]);
        if (drawn("T")) extend(gpu, "T", p.stamps, [p.vals(g.T)]);
        if (drawn("p")) extend(gpu, "p", p.stamps, [p.vals(g.p)]);
      }
      if (!drawn("m")) return;
      if (p.redrawMemory) drawChart(gpu, "m");
      else extend(gpu, "m", p.stamps, [...gpu.deps.map((n) => p.vals(p.dm[n])), p.vals(g.mo), p.vals(gpu.mt)]);
    });
  }

  function checkStale() {
    const now = Date.now();
    state.hosts.forEach((view) => {
      if (now - view.lastSampleMs > STALE_MS) setOnline(view, false, "no live samples");
    });
  }

  // --- the connection -------------------------------------------------------------------------

  function connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${scheme}://${location.host}/ws/gpus/?window=${encodeURIComponent(state.window)}`);
    state.ws = ws;
    setStatus("connecting", "connecting…");
    ws.onopen = () => { state.backoffMs = BACKOFF_MIN_MS; setStatus("live", "live"); };
    ws.onmessage = (event) => {
      const msg = JSON.parse(event.data);
      if (msg.type === "backfill") onBackfill(msg);
      else if (msg.type === "sample") onSample(msg);
      else if (msg.type === "host") askForHost(msg.h); // (re)registered: its GPUs may be new
      else if (msg.type === "error") console.warn("gpus websocket:", msg.error);
    };
    ws.onclose = (event) => {
      if (state.ws !== ws) return;
      if (event.code === 4401 || event.code === 4403) {
        state.stopped = true;
        setStatus("closed", event.code === 4401 ? "signed out: reload the page" : "not allowed");
        return;
      }
      const delay = state.backoffMs;
      state.backoffMs = Math.min(BACKOFF_MAX_MS, state.backoffMs * 2);
      setStatus("reconnecting", `disconnected, retrying in ${(delay / 1000).toFixed(1)} s`);
      setTimeout(connect, delay);
    };
  }

  root.querySelectorAll("button[data-window]").forEach((button) => {
    button.addEventListener("click", () => {
      const ws = state.ws;
      state.window = button.dataset.window;
      if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "window", window: state.window }));
    });
  });
  setInterval(checkStale, 2000);
  connect();
  window.shardboardGpus = state; // for debugging and the browser tests
})();
