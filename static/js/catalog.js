// Models catalog: live search (HTML fragments) and the plan panel (JSON -> Plotly bars).
(function () {
  "use strict";

  const PLOTLY_CONFIG = { showSendToCloud: false, displaylogo: false, responsive: true };
  const COLORS = ["#4e79a7", "#f28e2b", "#9c755f", "#b07aa1", "#59a14f"];

  function debounce(fn, ms) {
    let timer = null;
    return function () {
      clearTimeout(timer);
      timer = setTimeout(fn, ms);
    };
  }

  function query(form) {
    const params = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v !== "") params.append(k, v);
    return params;
  }

  // Fetches whose answers arrive out of order are dropped: only the latest one counts.
  function latestOnly() {
    let controller = null;
    return function (url) {
      if (controller) controller.abort();
      controller = new AbortController();
      return fetch(url, { signal: controller.signal, headers: { "X-Requested-With": "fetch" } });
    };
  }

  // -- search -----------------------------------------------------------------------------

  function initSearch(form) {
    const results = document.getElementById("results");
    const get = latestOnly();
    function load(params) {
      results.classList.add("plan-busy");
      return get(form.dataset.results + "?" + params)
        .then((r) => r.text())
        .then((html) => {
          results.innerHTML = html;
          results.classList.remove("plan-busy");
          history.replaceState(null, "", "?" + params);
        })
        .catch((err) => {
          if (err.name === "AbortError") return;
          results.classList.remove("plan-busy");
          results.innerHTML = '<div class="banner bad">The search failed: ' + err.message + "</div>";
        });
    }
    const refresh = () => load(query(form));
    form.addEventListener("input", debounce(refresh, 250));
    form.addEventListener("change", refresh);
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      refresh();
    });
    results.addEventListener("click", (ev) => {
      const link = ev.target.closest("a[data-page]");
      if (!link) return;
      ev.preventDefault();
      const params = query(form);
      params.set("page", link.dataset.page);
      load(params);
    });
  }

  // -- plan panel -------------------------------------------------------------------------

  function text(id, value) {
    const el = document.getElementById(id);
    if (el) el.textContent = value;
    return el;
  }

  // The chart is never purged: a purge while a hover or a responsive resize is pending makes
  // Plotly throw (`_rehover` of undefined, `emit is not a function`). With no plan it is hidden.
  function drawChart(plan) {
    const el = document.getElementById("plan-chart");
    if (!el || !window.Plotly) return;
    el.hidden = !plan;
    if (!plan) return;
    const c = plan.chart;
    const xs = c.labels.map((_, i) => i);
    const traces = c.parts.map((part, i) => ({
      type: "bar",
      name: part.name,
      x: xs,
      y: part.gib,
      width: 0.7,
      marker: { color: COLORS[i % COLORS.length] },
      hovertemplate: "%{y:.2f} GiB<extra>" + part.name + "</extra>",
    }));
    // Capacity and budget as a line across each GPU's bar (numeric x: bars sit at 0..n-1).
    const level = (name, values, color, dash) => ({
      type: "scatter",
      mode: "lines",
      name: name,
      x: xs.flatMap((i) => [i - 0.42, i + 0.42, null]),
      y: values.flatMap((v) => [v, v, null]),
      line: { color: color, width: 2, dash: dash },
      hovertemplate: "%{y:.2f} GiB<extra>" + name + "</extra>",
    });
    traces.push(level("GPU capacity", c.capacity_gib, "#111827", "solid"));
    traces.push(level("vLLM budget", c.budget_gib, "#dc2626", "dash"));
    const layout = {
      barmode: "stack",
      margin: { l: 50, r: 10, t: 10, b: 40 },
      xaxis: { tickvals: xs, ticktext: c.labels, range: [-0.6, xs.length - 0.4] },
      yaxis: { title: { text: "GiB" }, rangemode: "tozero" },
      legend: { orientation: "h", y: -0.15 },
      datarevision: Date.now(),
    };
    window.Plotly.react(el, traces, layout, PLOTLY_CONFIG);
  }

  function cell(row, content) {
    const td = row.insertCell();
    td.textContent = content;
    return td;
  }

  function drawAlternatives(list) {
    const body = document.querySelector("#plan-alternatives tbody");
    if (!body) return;
    body.replaceChildren();
    for (const a of list || []) {
      const row = body.insertRow();
      row.className = (a.chosen ? "chosen" : a.fits ? "" : "rejected") + (a.tight ? " tight" : "");
      cell(row, a.tensor_parallel_size + " × " + a.pipeline_parallel_size);
      cell(row, a.replicas).className = "num";
      cell(row, a.kv_cache_tokens_text).className = "num";
      cell(row, a.max_concurrency_text).className = "num";
      const margin = "fits only within the planner's margin";
      const verdict = a.chosen
        ? "chosen" + (a.tight ? ", " + margin : "")
        : a.fits && a.context_clipped
          ? "fits only with the context clipped to " + a.max_model_len + " tokens"
          : a.fits && a.tight
            ? margin + ": " + a.tight_reasons.join(" ")
            : a.fits
              ? "fits, ranked lower"
              : "rejected: " + a.reasons.join(" ");
      const td = cell(row, verdict);
      for (const w of a.warnings) {
        const div = document.createElement("div");
        div.className = "muted";
        div.textContent = w;
        td.appendChild(div);
      }
    }
  }

  function drawList(id, items, className) {
    const list = document.getElementById(id);
    if (!list) return;
    list.replaceChildren();
    for (const item of items || []) {
      const li = document.createElement("li");
      if (className) li.className = className;
      li.textContent = item;
      list.appendChild(li);
    }
  }

  function drawShares(lines) {
    drawList("plan-shares", lines);
  }

  function drawWarnings(warnings) {
    drawList("plan-warnings", warnings, "banner warn");
  }

  function launchNote(payload, targetIsHost, online) {
    if (!targetIsHost) return "Pick a registered host to launch.";
    if (!online) return "The host is offline.";
    if (!payload.ok) return "This plan does not fit.";
    return payload.plan.launch_block || payload.plan.launch_note || "";
  }

  // A plan whose stages span hosts launches on its first host with the others as `hosts`.
  function drawLaunchHosts(form, names) {
    drawHiddenHosts(form, names, form.querySelector("#launch-button"));
  }

  function drawHiddenHosts(form, names, button) {
    for (const input of form.querySelectorAll('input[type=hidden][name="hosts"]')) input.remove();
    for (const name of names || []) {
      const input = document.createElement("input");
      input.type = "hidden";
      input.name = "hosts";
      input.value = name;
      form.insertBefore(input, button);
    }
  }

  // A Hub model over several hosts: one click fetches it onto every host of the plan.
  function drawPrefetch(plan) {
    const form = document.getElementById("prefetch-plan-form");
    if (!form) return;
    const hosts = plan.prefetch_hosts || [];
    const launch = plan.launch || {};
    form.hidden = hosts.length === 0;
    form.querySelector('input[name="repo_id"]').value = launch.model_ref || "";
    form.querySelector('input[name="revision"]').value = launch.revision || "";
    drawHiddenHosts(form, hosts, form.querySelector("#prefetch-plan-button"));
    text("prefetch-plan-note", hosts.join(", "));
  }

  function drawLaunch(payload, targetIsHost) {
    const form = document.getElementById("launch-form");
    if (!form) return;
    const fields = (payload.plan && payload.plan.launch) || {};
    for (const [k, v] of Object.entries(fields)) {
      const input = form.querySelector('input[type=hidden][name="' + k + '"]');
      if (input) input.value = v;
    }
    drawLaunchHosts(form, payload.plan && payload.plan.launch_hosts);
    drawPrefetch(payload.plan || {});
    const online = !payload.target || payload.target.online !== false;
    const blocked = Boolean(payload.plan && payload.plan.launch_block);
    form.querySelector("#launch-button").disabled = !(payload.ok && targetIsHost && online) || blocked;
    text("launch-note", launchNote(payload, targetIsHost, online));
  }

  function drawBanner(id, message) {
    const el = document.getElementById(id);
    if (!el) return;
    el.hidden = !message;
    el.textContent = message || "";
  }

  function drawClipOffer(offer) {
    const box = document.getElementById("plan-clip");
    if (!box) return;
    box.hidden = !offer;
    text("plan-clip-text", offer ? offer.text : "");
    const use = document.getElementById("plan-clip-use").dataset;
    use.len = offer ? offer.max_model_len : "";
    use.tp = offer ? offer.tensor_parallel_size : "";
    use.pp = offer ? offer.pipeline_parallel_size : "";
  }

  function drawPlan(payload, targetIsHost) {
    const plan = payload.plan;
    drawBanner("plan-error", payload.error);
    drawBanner("plan-notice", payload.notice);
    drawBanner("plan-reason", payload.reason);
    drawClipOffer(payload.clip_offer);
    if (payload.target) {
      text("plan-target", payload.target.label);
      document.getElementById("plan-simulated").hidden = !payload.target.simulated;
    }
    const kv = text("kv-tokens", plan ? plan.kv_cache_tokens.toLocaleString("en-US") : "—");
    kv.dataset.value = plan ? plan.kv_cache_tokens : 0;
    text("max-concurrency", plan ? plan.max_concurrency_text + "×" : "—");
    text("plan-kind", plan ? plan.model_kind : "");
    const kindFigure = document.getElementById("kind-figure");
    if (kindFigure) kindFigure.hidden = !(plan && plan.model_kind);
    const kvFigure = document.getElementById("kv-figure");
    if (kvFigure) kvFigure.hidden = Boolean(plan && plan.no_kv);
    const replicas = plan ? plan.replicas_text + (plan.tight ? " (tight)" : "") : "";
    const layout = plan && plan.device === "cpu" ? "CPU, TP " + plan.tensor_parallel_size : plan ? "TP " + plan.tensor_parallel_size + " × PP " + plan.pipeline_parallel_size : "";
    text("plan-layout", plan ? layout + ", " + replicas : "—");
    drawBanner("plan-tight", plan && plan.tight_text);
    drawList("plan-replicas", plan ? plan.replica_rows : [], "");
    drawList("plan-stages", plan ? plan.stage_rows : [], "");
    drawList("plan-format-notes", plan ? plan.format_notes : [], "");
    text("plan-context", plan ? plan.max_model_len + " tokens" : "—");
    text("plan-ms", payload.server_ms !== undefined ? payload.server_ms + " ms" : "—");
    for (const key of ["vllm", "docker", "kubernetes"]) {
      text("cmd-" + key, plan ? plan.commands[key] : "");
    }
    drawWarnings(plan && plan.warnings);
    drawList("plan-layer-notes", plan ? plan.layer_notes : [], "");
    drawShares(plan && plan.shares);
    drawAlternatives(payload.alternatives);
    drawChart(plan);
    drawLaunch(payload, targetIsHost);
  }

  // Picking hosts starts from the online ones; offline ones are added for what-if plans.
  function pickOnline(select) {
    if (!select || select.selectedOptions.length) return;
    for (const option of select.options) option.selected = option.dataset.online === "1";
  }

  function initPlan(form) {
    const result = document.getElementById("plan-result");
    const target = form.querySelector("[name=target]");
    const gpusLabel = document.getElementById("gpus-label");
    const hostsLabel = document.getElementById("hosts-label");
    const get = latestOnly();
    const isHost = () => target.value !== "whatif";
    let sent = null;
    let timer = null;
    // One timer for both events (a select fires input and change) and no request for a query
    // already answered: every redraw answers one change, in order.
    function schedule(ms) {
      clearTimeout(timer);
      timer = setTimeout(replan, ms);
    }
    function replan() {
      gpusLabel.hidden = isHost();
      if (hostsLabel) hostsLabel.hidden = target.value !== "picked";
      if (target.value === "picked") pickOnline(form.querySelector("[name=hosts]"));
      const params = query(form).toString();
      if (params === sent) return;
      sent = params;
      result.classList.add("plan-busy");
      get(form.dataset.endpoint + "?" + params)
        .then((r) => {
          const type = r.headers.get("content-type") || "";
          if (!type.includes("json")) throw new Error("the server answered " + r.status);
          return r.json();
        })
        .then((payload) => {
          result.classList.remove("plan-busy");
          drawPlan(payload, isHost());
          result.dataset.revision = String(Number(result.dataset.revision || 0) + 1);
        })
        .catch((err) => {
          if (err.name === "AbortError") return;
          sent = null;
          result.classList.remove("plan-busy");
          drawPlan({ ok: false, error: "Planning failed: " + err.message, plan: null }, isHost());
        });
    }
    form.addEventListener("input", () => schedule(200));
    form.addEventListener("change", () => schedule(50));
    form.addEventListener("submit", (ev) => ev.preventDefault());
    const useClip = document.getElementById("plan-clip-use");
    if (useClip)
      useClip.addEventListener("click", () => {
        // The offer is a context *and* the layout that serves it: pin both.
        form.querySelector("[name=max_model_len]").value = useClip.dataset.len;
        form.querySelector("[name=tensor_parallel_size]").value = useClip.dataset.tp;
        form.querySelector("[name=pipeline_parallel_size]").value = useClip.dataset.pp;
        replan();
      });
    sent = query(form).toString();  // the server drew the first plan for these fields
    const initial = document.getElementById("plan-data");
    if (initial) drawChart(JSON.parse(initial.textContent).plan);
  }

  // -- copy buttons -----------------------------------------------------------------------

  function copy(button) {
    const source = document.getElementById(button.dataset.copy);
    const value = source ? source.textContent : "";
    const done = () => {
      button.textContent = "Copied";
      setTimeout(() => (button.textContent = "Copy"), 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(value).then(done, () => fallbackCopy(source, done));
    } else {
      fallbackCopy(source, done);
    }
  }

  function fallbackCopy(source, done) {
    const range = document.createRange();
    range.selectNodeContents(source);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    if (document.execCommand("copy")) done();
  }

  document.addEventListener("click", (ev) => {
    const button = ev.target.closest("button[data-copy]");
    if (button) copy(button);
  });

  document.addEventListener("DOMContentLoaded", () => {
    const search = document.getElementById("search-form");
    if (search) initSearch(search);
    const plan = document.getElementById("plan-form");
    if (plan) initPlan(plan);
  });
})();
