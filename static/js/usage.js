// The Usage page's charts: stacked bars per day from the page's own data (teams.usage.summary).
(function () {
  "use strict";
  const LAYOUT = { barmode: "stack", margin: { l: 55, r: 20, t: 30, b: 70 }, legend: { orientation: "h", x: 0, y: -0.25, yanchor: "top" }, font: { size: 11 }, autosize: true };
  const CONFIG = { displaylogo: false, responsive: true };

  function bars(days, series) {
    return Object.keys(series).map(function (name) {
      return { type: "bar", name: name, x: days, y: days.map(function (d) { return series[name][d] || 0; }) };
    });
  }

  function plot(id, title, unit, days, series) {
    const el = document.getElementById(id);
    if (!el || typeof Plotly === "undefined") { return; }
    const traces = bars(days, series);
    const layout = Object.assign({}, LAYOUT, { title: { text: title }, yaxis: { title: { text: unit }, rangemode: "tozero" } });
    if (!traces.length) {
      layout.annotations = [{ text: "nothing in this window", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }];
    }
    Plotly.newPlot(el, traces, layout, CONFIG);
    el.dataset.traces = String(traces.length);
  }

  const node = document.getElementById("usage-data");
  if (!node) { return; }
  const data = JSON.parse(node.textContent);
  plot("chart-gpu-team", "GPU-hours by team", "GPU-hours", data.days, data.gpu_hours.team);
  plot("chart-gpu-user", "GPU-hours by user", "GPU-hours", data.days, data.gpu_hours.user);
  plot("chart-tokens-token", "Gateway tokens by API token", "tokens", data.days, data.gateway_tokens.token);
  plot("chart-tokens-deployment", "Gateway tokens by deployment", "tokens", data.days, data.gateway_tokens.deployment);
})();
