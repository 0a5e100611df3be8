// The GGUF plan panel: the llama.cpp plan as JSON -> the device table, the split and the bars.
(function () {
  "use strict";

  const PLOTLY_CONFIG = { showSendToCloud: false, displaylogo: false, responsive: true };
  const COLORS = ["#4e79a7", "#f28e2b", "#9c755f", "#b07aa1"];

  function query(form) {
    const params = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v !== "") params.append(k, v);
    return params;
  }

  function text(id, value) {
    const el = document.getElementById(id);
    if (el) el.textContent = value;
    return el;
  }

  function banner(id, message) {
    const el = document.getElementById(id);
    if (!el) return;
    el.hidden = !message;
    el.textContent = message || "";
  }

  function list(id, items, className) {
    const el = document.getElementById(id);
    if (!el) return;
    el.replaceChildren();
    for (const item of items || []) {
      const li = document.createElement("li");
      if (className) li.className = className;
      li.textContent = item;
      el.appendChild(li);
    }
  }

  function rows(id, entries, cells) {
    const body = document.querySelector("#" + id + " tbody");
    if (!body) return;
    body.replaceChildren();
    for (const entry of entries || []) {
      const row = body.insertRow();
      const values = cells(entry);
      row.className = values.className || "";
      values.cells.forEach((value, i) => {
        const td = row.insertCell();
        td.textContent = value;
        if (values.numeric && values.numeric.includes(i)) td.className = "num";
      });
    }
  }

  // Never purged (a purge during a pending resize makes Plotly throw); hidden with no plan.
  function drawChart(plan) {
    const el = document.getElementById("plan-chart");
    if (!el || !window.Plotly) return;
    el.hidden = !plan;
    if (!plan) return;
    const c = plan.chart;
    const xs = c.labels.map((_, i) => i);
    const traces = c.parts.map((part, i) => ({
      type: "bar", name: part.name, x: xs, y: part.gib, width: 0.7,
      marker: { color: COLORS[i % COLORS.length] },
      hovertemplate: "%{y:.2f} GiB<extra>" + part.name + "</extra>",
    }));
    const level = (name, values, color, dash) => ({
      type: "scatter", mode: "lines", name: name,
      x: xs.flatMap((i) => [i - 0.42, i + 0.42, null]),
      y: values.flatMap((v) => [v, v, null]),
      line: { color: color, width: 2, dash: dash },
    });
    traces.push(level("GPU free", c.capacity_gib, "#111827", "solid"));
    traces.push(level("free less the margin", c.budget_gib, "#dc2626", "dash"));
    const layout = {
      barmode: "stack", margin: { l: 50, r: 10, t: 10, b: 40 },
      xaxis: { tickvals: xs, ticktext: c.labels, range: [-0.6, xs.length - 0.4] },
      yaxis: { title: { text: "GiB" }, rangemode: "tozero" },
      legend: { orientation: "h", y: -0.15 }, datarevision: Date.now(),
    };
    window.Plotly.react(el, traces, layout, PLOTLY_CONFIG);
  }

  function drawPlan(payload) {
    const plan = payload.plan;
    banner("plan-error", payload.error);
    banner("plan-notice", payload.notice);
    if (payload.target) {
      text("plan-target", payload.target.label);
      document.getElementById("plan-simulated").hidden = !payload.target.simulated;
    }
    const split = text("plan-split", plan ? plan.split_text : "—");
    split.dataset.ratios = plan ? plan.tensor_split_text : "";
    split.dataset.gpus = plan ? plan.gpus : 0;
    text("plan-ngl", plan ? plan.gpu_layers + " of " + plan.layers_total : "—");
    text("plan-context", plan ? plan.context_cells : "—");
    text("plan-note", plan ? plan.note : "");
    text("plan-ms", payload.server_ms !== undefined ? payload.server_ms + " ms" : "—");
    banner("plan-offload", plan && plan.partial_offload ? plan.partial_offload.text : "");
    rows("plan-devices", plan ? plan.rows : [], (r) => ({
      cells: [r.device, r.layers, r.weights, r.kv, r.compute, r.other, r.free],
      numeric: [2, 3, 4, 5, 6],
    }));
    list("plan-warnings", plan ? plan.warnings : [], "banner warn");
    text("plan-flags", plan ? plan.flags_text : "");
    for (const key of ["llamacpp", "docker"]) text("cmd-" + key, plan ? plan.commands[key] : "");
    rows("plan-alternatives", payload.alternatives, (a) => ({
      className: a.chosen ? "chosen" : a.fits ? "" : "rejected",
      cells: [a.host + ": " + a.gpus.join(", "), a.tensor_split_text, a.gpu_layers,
        a.chosen ? "chosen" : a.fits ? "fits, ranked lower: " + a.note : "rejected: " + a.reasons.join(" ")],
      numeric: [2],
    }));
    drawChart(plan);
    drawLaunch(payload);
  }

  // Launch posts the plan's own fields (engine llamacpp, the quantization, its split) to the
  // launch form's endpoint, as the vLLM panel does; only a registered host that answers.
  function drawLaunch(payload) {
    const form = document.getElementById("launch-form");
    if (!form) return;
    const plan = payload.plan;
    for (const [k, v] of Object.entries((plan && plan.launch) || {})) {
      const input = form.querySelector('input[type=hidden][name="' + k + '"]');
      if (input) input.value = v;
    }
    const target = payload.target || {};
    const online = target.online !== false;
    form.querySelector("#launch-button").disabled = !(payload.ok && target.host && online);
    let note = plan ? plan.launch_note : "";
    if (!target.host) note = "Pick a registered host to launch.";
    else if (!online) note = "The host is offline.";
    else if (!payload.ok) note = "This plan does not fit.";
    text("launch-note", note);
  }

  function initPlan(form) {
    const result = document.getElementById("plan-result");
    const target = form.querySelector("[name=target]");
    const gpusLabel = document.getElementById("gpus-label");
    let controller = null;
    let sent = query(form).toString(); // the server drew the first plan for these fields
    let timer = null;
    function replan() {
      gpusLabel.hidden = target.value !== "whatif";
      const params = query(form).toString();
      if (params === sent) return;
      sent = params;
      if (controller) controller.abort();
      controller = new AbortController();
      result.classList.add("plan-busy");
      fetch(form.dataset.endpoint + "?" + params, { signal: controller.signal })
        .then((r) => {
          const type = r.headers.get("content-type") || "";
          if (!type.includes("json")) throw new Error("the server answered " + r.status);
          return r.json();
        })
        .then((payload) => {
          result.classList.remove("plan-busy");
          drawPlan(payload);
          result.dataset.revision = String(Number(result.dataset.revision || 0) + 1);
        })
        .catch((err) => {
          if (err.name === "AbortError") return;
          sent = null;
          result.classList.remove("plan-busy");
          drawPlan({ ok: false, error: "Planning failed: " + err.message, plan: null });
        });
    }
    function schedule(ms) {
      clearTimeout(timer);
      timer = setTimeout(replan, ms);
    }
    form.addEventListener("input", () => schedule(250));
    form.addEventListener("change", () => schedule(50));
    form.addEventListener("submit", (ev) => ev.preventDefault());
    const initial = document.getElementById("plan-data");
    if (initial) drawChart(JSON.parse(initial.textContent).plan);
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = document.getElementById("gguf-plan-form");
    if (form) initPlan(form);
  });
})();
