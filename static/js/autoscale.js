// The deployment page's Autoscaling section: an HTML fragment from deployments.autoscale,
// then its chart (replicas, load, the SLO) and decisions, refreshed from a small JSON view.
(function () {
  "use strict";
  const box = document.getElementById("autoscale");
  if (!box || !box.dataset.url) { return; }
  const REFRESH_MS = 3000;

  function cell(text) { const td = document.createElement("td"); td.textContent = text; return td; }

  function decisions(rows) {
    const body = document.querySelector("#autoscale-decisions tbody");
    if (!body) { return; }
    body.replaceChildren(...rows.map(function (d) {
      const tr = document.createElement("tr");
      tr.append(cell(new Date(d.at).toLocaleTimeString()), cell(d.before + " → " + d.after),
        cell(d.refused ? d.reason + " (refused: " + d.refused + ")" : d.reason));
      return tr;
    }));
  }

  function plot(el, data) {
    const t = data.points.map(function (p) { return new Date(p.at_s * 1000); });
    const col = function (k) { return data.points.map(function (p) { return p[k]; }); };
    const traces = [
      { x: t, y: col("replicas"), name: "replicas", type: "scatter", line: { shape: "hv", width: 3 } },
      { x: t, y: col("serving"), name: "serving", type: "scatter", line: { shape: "hv", dash: "dot" } },
      { x: t, y: col("running"), name: "running requests", type: "scatter", yaxis: "y2" },
      { x: t, y: col("waiting"), name: "waiting requests", type: "scatter", yaxis: "y2" },
      { x: t, y: col("ttft_p90_s"), name: "p90 TTFT (s)", type: "scatter", yaxis: "y3", connectgaps: false },
    ];
    const slo = data.policy && data.policy.ttft_p90_s;
    if (slo && t.length) {
      traces.push({ x: [t[0], t[t.length - 1]], y: [slo, slo], name: "TTFT SLO", yaxis: "y3", line: { dash: "dash" } });
    }
    const layout = {
      margin: { t: 10, r: 120, b: 30, l: 40 }, legend: { orientation: "h" },
      yaxis: { title: "replicas", rangemode: "tozero", dtick: 1 },
      yaxis2: { title: "requests", overlaying: "y", side: "right", rangemode: "tozero" },
      yaxis3: { title: "s", overlaying: "y", side: "right", position: 0.95, anchor: "free", rangemode: "tozero" },
    };
    window.Plotly.react(el, traces, layout, { displayModeBar: false, responsive: true });
  }

  function refresh() {
    const el = document.getElementById("autoscale-chart");
    if (!el) { return; }
    fetch(el.dataset.url, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (data) {
        document.getElementById("autoscale-replicas").textContent = String(data.live_replicas);
        document.getElementById("autoscale-last").textContent = data.last_decision;
        decisions(data.decisions);
        if (window.Plotly) { plot(el, data); }
      })
      .catch(function () { /* the next refresh tries again */ })
      .finally(function () { setTimeout(refresh, REFRESH_MS); });
  }

  fetch(box.dataset.url, { credentials: "same-origin" })
    .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
    .then(function (html) { box.innerHTML = html; refresh(); })
    .catch(function () { box.textContent = "Autoscaling could not be loaded."; });
})();
