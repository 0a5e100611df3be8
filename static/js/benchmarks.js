// Benchmark charts (a run, or two runs compared) on the vendored plotly.min.js (scatter and
// bar only: the basic bundle), and the run's live progress over /ws/benchmarks/<id>/.
(function () {
  "use strict";
  const LAYOUT = { margin: { l: 55, r: 55, t: 30, b: 90 }, legend: { orientation: "h", x: 0, y: -0.32, yanchor: "top" }, font: { size: 11 }, autosize: true };
  const CONFIG = { displaylogo: false, responsive: true };

  function plot(id, traces, layout) {
    const el = document.getElementById(id);
    if (!el || typeof Plotly === "undefined") { return; }
    Plotly.newPlot(el, traces, Object.assign({}, LAYOUT, layout), CONFIG);
  }

  function line(x, y, name, extra) {
    return Object.assign({ x: x, y: y, name: name, type: "scatter", mode: "lines+markers" }, extra || {});
  }

  function slaShape(value, label) {
    return { type: "line", xref: "paper", x0: 0, x1: 1, y0: value, y1: value, line: { dash: "dot", color: "#b91c1c" }, name: label };
  }

  function runCharts(data) {
    const lv = data.levels;
    const c = lv.load;
    const axis = data.mode === "rate" ? "request rate (req/s)" : "concurrency";
    plot("chart-throughput", [
      line(c, lv.output_throughput, "output tok/s"),
      line(c, lv.request_throughput, "requests/s", { yaxis: "y2", line: { dash: "dash" } }),
    ], { title: { text: "Throughput vs " + axis }, xaxis: { title: { text: axis }, type: "log" },
         yaxis: { title: { text: "tok/s" }, rangemode: "tozero" },
         yaxis2: { title: { text: "req/s" }, overlaying: "y", side: "right", rangemode: "tozero" } });
    const shapes = [];
    if (data.sla.ttft_p95_ms) { shapes.push(slaShape(data.sla.ttft_p95_ms, "SLA TTFT p95")); }
    if (data.sla.itl_p95_ms) { shapes.push(slaShape(data.sla.itl_p95_ms, "SLA ITL p95")); }
    plot("chart-latency", [
      line(c, lv.latency.ttft_ms.p50, "TTFT p50"),
      line(c, lv.latency.ttft_ms.p95, "TTFT p95"),
      line(c, lv.latency.ttft_ms.p99, "TTFT p99"),
      line(c, lv.latency.itl_ms.p95, "ITL p95"),
      line(c, lv.latency.e2el_ms.p95, "E2EL p95"),
    ], { title: { text: "Latency percentiles vs " + axis }, xaxis: { title: { text: axis }, type: "log" },
         yaxis: { title: { text: "ms" }, type: "log" }, shapes: shapes });
    const hist = function (key) {
      return lv[key].map(function (h, i) { return { x: h.x, y: h.y, width: h.width, type: "bar", opacity: 0.6, name: (data.mode === "rate" ? c[i] + " req/s" : "c=" + c[i]) }; });
    };
    plot("chart-ttft", hist("ttft_hist"), { title: { text: "TTFT distribution" }, barmode: "overlay", xaxis: { title: { text: "ms" } }, yaxis: { title: { text: "requests" } } });
    plot("chart-itl", hist("itl_hist"), { title: { text: "ITL distribution" }, barmode: "overlay", xaxis: { title: { text: "ms" } }, yaxis: { title: { text: "gaps" } } });
    gpuCharts(data);
  }

  function gpuCharts(data) {
    const gpu = data.gpu;
    if (!gpu || !gpu.t.length) { return; }
    const t = gpu.t.map(function (ms) { return new Date(ms); });
    const suffix = data.simulated ? " (simulated GPUs)" : "";
    const levelShapes = (gpu.levels || []).map(function (l) {
      return { type: "rect", xref: "x", yref: "paper", x0: new Date(l.from), x1: new Date(l.to), y0: 0, y1: 1, fillcolor: "#2563eb", opacity: 0.06, line: { width: 0 } };
    });
    const series = function (key) {
      return Object.keys(gpu.gpus).map(function (i) { return line(t, gpu.gpus[i][key], "GPU" + i, { mode: "lines" }); });
    };
    plot("chart-gpu-util", series("util"), { title: { text: "GPU utilization %" + suffix }, yaxis: { range: [0, 100] }, shapes: levelShapes });
    plot("chart-gpu-memory", series("memory_gib"), { title: { text: "GPU memory used (GiB)" + suffix }, yaxis: { rangemode: "tozero" }, shapes: levelShapes });
    plot("chart-gpu-power", series("power_w"), { title: { text: "GPU power (W)" + suffix }, yaxis: { rangemode: "tozero" }, shapes: levelShapes });
  }

  function compareCharts(runs) {
    const thr = [], lat = [];
    runs.forEach(function (r) {
      const lv = r.levels;
      thr.push(line(lv.load, lv.output_throughput, r.title));
      lat.push(line(lv.load, lv.latency.ttft_ms.p95, r.title + " TTFT p95"));
      lat.push(line(lv.load, lv.latency.itl_ms.p95, r.title + " ITL p95", { line: { dash: "dot" } }));
    });
    const modes = runs.map(function (r) { return r.mode; });
    const axis = modes[0] !== modes[1] ? "concurrency or request rate" : (modes[0] === "rate" ? "request rate (req/s)" : "concurrency");
    plot("compare-throughput", thr, { title: { text: "Output throughput vs " + axis }, xaxis: { title: { text: axis }, type: "log" }, yaxis: { title: { text: "tok/s" }, rangemode: "tozero" } });
    plot("compare-latency", lat, { title: { text: "Latency p95 vs " + axis }, xaxis: { title: { text: axis }, type: "log" }, yaxis: { title: { text: "ms" }, type: "log" } });
  }

  function progress() {
    const el = document.getElementById("progress");
    if (!el || el.dataset.ended === "1") { return; }
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(proto + "://" + location.host + el.dataset.ws);
    let levelsDone = document.querySelectorAll("#levels tr[data-level]").length;
    ws.onmessage = function (ev) {
      const msg = JSON.parse(ev.data);
      const p = msg.progress || {};
      const status = document.getElementById("run-status");
      status.textContent = msg.status_label;
      status.className = "badge status-" + msg.status;
      if (p.load) {
        el.textContent = "Level " + (p.level + 1) + " · load " + p.load + " · " + p.done + " answered" +
          (p.failed ? ", " + p.failed + " failed" : "") + (p.total ? " of " + p.total : "");
      }
      if (["succeeded", "failed", "cancelled"].indexOf(msg.status) >= 0 || msg.levels_done > levelsDone) {
        levelsDone = msg.levels_done;
        setTimeout(function () { location.reload(); }, 300);
      }
    };
    ws.onclose = function () { setTimeout(progress, 2000); };
  }

  const run = document.getElementById("benchmark-data");
  if (run) { runCharts(JSON.parse(run.textContent)); progress(); }
  const compare = document.getElementById("compare-data");
  if (compare) { compareCharts(JSON.parse(compare.textContent)); }
})();
