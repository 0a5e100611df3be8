/* Shardboard playground: streams answers from /v1/ (fetch + ReadableStream SSE parsing),
   measures them in the browser too, compares two deployments, keeps a per-user history. */
(function () {
  "use strict";

  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const tokensBox = $("#tokens");
  const csrf = tokensBox.dataset.csrf;
  const app = $("#playground");
  let freshToken = null;
  let running = [];

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify(body || {}),
    });
  }

  // --- the request ------------------------------------------------------------------------

  function mode() { return $("input[name=mode]:checked").value; }

  function numberOf(id) {
    const raw = $(id).value.trim();
    return raw === "" ? null : Number(raw);
  }

  function parameters() {
    const params = {
      max_tokens: numberOf("#max-tokens"),
      temperature: numberOf("#temperature"),
      top_p: numberOf("#top-p"),
      seed: numberOf("#seed"),
      presence_penalty: numberOf("#presence-penalty"),
      frequency_penalty: numberOf("#frequency-penalty"),
    };
    const stops = $("#stop-seqs").value.split("\n").filter((s) => s !== "");
    if (stops.length) params.stop = stops;
    for (const key of Object.keys(params)) if (params[key] === null) delete params[key];
    if (params.presence_penalty === 0) delete params.presence_penalty;
    if (params.frequency_penalty === 0) delete params.frequency_penalty;
    return params;
  }

  function messages() {
    const out = [];
    const system = $("#system").value.trim();
    if (system) out.push({ role: "system", content: system });
    for (const row of $$(".pg-msg")) {
      const content = $("textarea", row).value;
      if (content.trim()) out.push({ role: $("select", row).value, content: content });
    }
    return out;
  }

  function requestBody(model) {
    const body = Object.assign({ model: model, stream: true }, parameters());
    if (mode() === "chat") body.messages = messages();
    else body.prompt = $("#prompt").value;
    return body;
  }

  function endpoint() { return mode() === "chat" ? "/v1/chat/completions" : "/v1/completions"; }

  // --- chat messages ------------------------------------------------------------------------

  function addMessage(role, content) {
    const row = document.createElement("div");
    row.className = "pg-msg";
    row.innerHTML = '<select aria-label="Role"><option>user</option><option>assistant</option><option>system</option></select>' +
      '<textarea rows="2" aria-label="Message"></textarea><button type="button" title="Remove">×</button>';
    $("select", row).value = role || "user";
    $("textarea", row).value = content || "";
    $("button", row).addEventListener("click", () => row.remove());
    $("#messages").appendChild(row);
    return row;
  }

  function setMessages(list) {
    $("#messages").innerHTML = "";
    $("#system").value = "";
    for (const m of list || []) {
      if (m.role === "system" && !$("#system").value) $("#system").value = m.content;
      else addMessage(m.role, typeof m.content === "string" ? m.content : JSON.stringify(m.content));
    }
    if (!$$(".pg-msg").length) addMessage("user", "");
  }

  // --- one streamed answer into one pane ----------------------------------------------------

  function fmt(value, unit) {
    if (value === null || value === undefined) return "–";
    return unit ? value + " " + unit : String(value);
  }

  function paneReset(pane, model) {
    $(".pane-title", pane).textContent = model;
    $(".pg-answer", pane).textContent = "";
    $(".pane-error", pane).textContent = "";
    $$(".pg-metrics td", pane).forEach((td) => { td.textContent = "–"; });
    paneStatus(pane, "waiting", "warn");
  }

  function paneStatus(pane, text, kind) {
    const badge = $(".pane-status", pane);
    badge.textContent = text;
    badge.className = "badge pane-status " + (kind || "");
    pane.dataset.state = text;
  }

  function showServer(pane, m) {
    $(".m-ttft-server", pane).textContent = fmt(m.ttft_ms, "ms");
    $(".m-tps-server", pane).textContent = fmt(m.tokens_per_s);
    $(".m-prompt-server", pane).textContent = fmt(m.prompt_tokens);
    $(".m-completion-server", pane).textContent = fmt(m.completion_tokens);
  }

  function showBrowser(pane, b) {
    $(".m-ttft-browser", pane).textContent = fmt(b.ttft_ms, "ms");
    $(".m-tps-browser", pane).textContent = fmt(b.tokens_per_s);
    $(".m-prompt-browser", pane).textContent = "–";
    $(".m-completion-browser", pane).textContent = fmt(b.completion_tokens);
  }

  function browserTimings(t) {
    const ms = (x) => Math.round(x * 100) / 100;
    const rate = t.chunks >= 2 && t.last > t.first ? Math.round(((t.chunks - 1) / ((t.last - t.first) / 1000)) * 10) / 10 : null;
    return {
      ttft_ms: t.first === null ? null : ms(t.first - t.start),
      duration_ms: ms(performance.now() - t.start),
      tokens_per_s: rate,
      completion_tokens: t.chunks,
      chunks: t.chunks,
    };
  }

  function chunkText(payload) {
    const choice = (payload.choices || [])[0];
    if (!choice) return "";
    if (choice.delta) return choice.delta.content || "";
    return choice.text || "";
  }

  function parseEvent(raw) {
    let name = "message";
    const data = [];
    for (const line of raw.split("\n")) {
      if (line.startsWith("event:")) name = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    return { name: name, data: data.join("\n") };
  }

  async function streamInto(pane, model, signal) {
    paneReset(pane, model);
    const t = { start: performance.now(), first: null, last: null, chunks: 0 };
    const state = { server: null, answer: "", error: null };
    let response;
    try {
      response = await fetch(endpoint(), {
        method: "POST",
        credentials: "same-origin",
        signal: signal,
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrf, "X-Shardboard-Playground": "1" },
        body: JSON.stringify(requestBody(model)),
      });
    } catch (err) {
      return finish(pane, t, state, err.name === "AbortError" ? "stopped" : "error", err.message);
    }
    if (!response.ok) {
      let message = "HTTP " + response.status;
      try { message = (await response.json()).error.message || message; } catch (e) { /* not JSON */ }
      return finish(pane, t, state, "error", message);
    }
    paneStatus(pane, "streaming", "ok");
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          handleEvent(pane, parseEvent(buffer.slice(0, cut)), t, state);
          buffer = buffer.slice(cut + 2);
        }
      }
    } catch (err) {
      return finish(pane, t, state, err.name === "AbortError" ? "stopped" : "error", err.name === "AbortError" ? "" : err.message);
    }
    return finish(pane, t, state, state.error ? "error" : "done", state.error);
  }

  function handleEvent(pane, event, t, state) {
    if (!event.data || event.data === "[DONE]") return;
    let payload;
    try { payload = JSON.parse(event.data); } catch (e) { return; }
    if (event.name === "shardboard") {
      state.server = payload;
      showServer(pane, payload);
      return;
    }
    if (payload.error) {
      state.error = payload.error.message || String(payload.error);
      return;
    }
    const text = chunkText(payload);
    if (!text) return;
    const now = performance.now();
    if (t.first === null) t.first = now;
    t.last = now;
    t.chunks += 1;
    state.answer += text;
    $(".pg-answer", pane).textContent = state.answer;
    if (t.chunks % 8 === 1) showBrowser(pane, browserTimings(t));
  }

  function finish(pane, t, state, status, message) {
    const browser = browserTimings(t);
    showBrowser(pane, browser);
    if (message) $(".pane-error", pane).textContent = message;
    paneStatus(pane, status, status === "done" ? "ok" : status === "stopped" ? "warn" : "bad");
    if (state.server && state.server.run_id) {
      post("/playground/runs/" + state.server.run_id + "/browser/", browser).then(refreshHistory);
    } else {
      setTimeout(refreshHistory, 300);
    }
    return { status: status, answer: state.answer };
  }

  // --- send, stop, compare ----------------------------------------------------------------

  function panes() {
    const compare = $("#compare").checked;
    const out = [{ pane: $('.pane[data-slot="a"]'), model: $("#deployment").value }];
    if (compare) out.push({ pane: $('.pane[data-slot="b"]'), model: $("#deployment-b").value });
    return out;
  }

  async function send() {
    const targets = panes();
    running = targets.map(() => new AbortController());
    $("#send").disabled = true;
    $("#stop").disabled = false;
    renderCode();
    const results = await Promise.all(targets.map((t, i) => streamInto(t.pane, t.model, running[i].signal)));
    running = [];
    $("#send").disabled = false;
    $("#stop").disabled = true;
    if (mode() === "chat" && targets.length === 1 && results[0].status === "done" && results[0].answer) {
      addMessage("assistant", results[0].answer);
      addMessage("user", "");
    }
  }

  function stop() {
    for (const controller of running) controller.abort();
  }

  function syncMode() {
    const chat = mode() === "chat";
    $("#chat-fields").classList.toggle("pg-hidden", !chat);
    $("#completion-fields").classList.toggle("pg-hidden", chat);
  }

  function syncCompare() {
    const on = $("#compare").checked;
    $("#deployment-b-label").classList.toggle("pg-hidden", !on);
    $('.pane[data-slot="b"]').classList.toggle("pg-hidden", !on);
    $("#panes").classList.toggle("compare", on);
  }

  // --- view code ----------------------------------------------------------------------------

  function renderCode() {
    if (!app) return;
    const base = app.dataset.gateway;
    const token = freshToken || "$SHARDBOARD_TOKEN";
    const body = requestBody($("#deployment").value);
    const json = JSON.stringify(body, null, 2);
    $("#code-curl").textContent =
      "curl -N " + base + endpoint().slice(3) + " \\\n" +
      "  -H 'Authorization: Bearer " + token + "' \\\n" +
      "  -H 'Content-Type: application/json' \\\n" +
      "  -d '" + json.replace(/'/g, "'\\''") + "'";
    const args = Object.entries(body).map(([k, v]) => "    " + k + "=" + pyValue(v) + ",").join("\n");
    const call = mode() === "chat" ? "client.chat.completions.create" : "client.completions.create";
    const read = mode() === "chat" ? "chunk.choices[0].delta.content or \"\"" : "chunk.choices[0].text";
    $("#code-python").textContent =
      "from openai import OpenAI\n\n" +
      "client = OpenAI(base_url=\"" + base + "\", api_key=\"" + (freshToken || "YOUR_SHARDBOARD_TOKEN") + "\")\n" +
      "stream = " + call + "(\n" + args + "\n)\n" +
      "for chunk in stream:\n    if chunk.choices:\n        print(" + read + ", end=\"\", flush=True)\n";
  }

  function pyValue(v) {
    if (v === true) return "True";
    if (v === false) return "False";
    if (v === null) return "None";
    return JSON.stringify(v);
  }

  // --- tokens -------------------------------------------------------------------------------

  async function createToken() {
    const response = await post(tokensBox.dataset.tokensUrl, { name: $("#token-name").value });
    const created = await response.json();
    if (!response.ok) { $("#new-token").textContent = created.error.message; return; }
    freshToken = created.token;
    const box = $("#new-token");
    box.textContent = "New token (copy it now, it is not shown again): " + created.token;
    box.classList.remove("pg-hidden");
    const row = document.createElement("tr");
    row.dataset.tokenId = created.id;
    row.innerHTML = "<td></td><td><code></code></td><td>now</td><td>never</td><td><button type=\"button\" class=\"revoke\">Revoke</button></td>";
    row.cells[0].textContent = created.name;
    $("code", row).textContent = created.prefix + "…";
    $(".revoke", row).dataset.url = "/playground/tokens/" + created.id + "/revoke/";
    ($("#token-list tbody") || $("#token-list")).appendChild(row);
    if (app) renderCode();
  }

  async function revokeToken(button) {
    const response = await post(button.dataset.url, {});
    if (response.ok) button.closest("tr").remove();
  }

  // --- history ------------------------------------------------------------------------------

  let runs = JSON.parse($("#runs-data").textContent);

  function renderHistory() {
    const body = $("#history tbody");
    body.innerHTML = "";
    for (const run of runs) {
      const tr = document.createElement("tr");
      tr.dataset.runId = run.id;
      const prompt = run.mode === "chat" ? ((run.messages || []).filter((m) => m.role === "user").pop() || {}).content : run.prompt;
      const cells = [new Date(run.created_at).toLocaleString(), run.deployment, run.mode, run.status,
        fmt(run.server.ttft_ms, "ms"), fmt(run.server.tokens_per_s), String(prompt || "")];
      for (const [i, text] of cells.entries()) {
        const td = document.createElement("td");
        td.textContent = text;
        if (i === 4 || i === 5) td.className = "num";
        if (i === 6) td.className = "snippet";
        tr.appendChild(td);
      }
      const actions = document.createElement("td");
      actions.innerHTML = '<button type="button" class="open">Open</button> <button type="button" class="rerun">Re-run</button>';
      $(".open", actions).addEventListener("click", () => reopen(run));
      $(".rerun", actions).addEventListener("click", () => { reopen(run); send(); });
      if (!app) $$("button", actions).forEach((b) => { b.disabled = true; });
      tr.appendChild(actions);
      body.appendChild(tr);
    }
  }

  async function refreshHistory() {
    const response = await fetch($("#history").dataset.runsUrl, { credentials: "same-origin" });
    if (!response.ok) return;
    runs = (await response.json()).runs;
    renderHistory();
  }

  function reopen(run) {
    if (!app) return;
    const select = $("#deployment");
    if ($$("option", select).some((o) => o.value === run.deployment)) select.value = run.deployment;
    $("input[name=mode][value=" + run.mode + "]").checked = true;
    syncMode();
    const p = run.parameters || {};
    const set = (id, v) => { $(id).value = v === undefined || v === null ? "" : v; };
    set("#max-tokens", p.max_tokens); set("#temperature", p.temperature); set("#top-p", p.top_p);
    set("#seed", p.seed); set("#presence-penalty", p.presence_penalty || 0); set("#frequency-penalty", p.frequency_penalty || 0);
    $("#stop-seqs").value = Array.isArray(p.stop) ? p.stop.join("\n") : (p.stop || "");
    if (run.mode === "chat") setMessages(run.messages); else $("#prompt").value = run.prompt;
    const pane = $('.pane[data-slot="a"]');
    paneReset(pane, run.deployment);
    $(".pg-answer", pane).textContent = run.answer;
    if (run.error) $(".pane-error", pane).textContent = run.error;
    showServer(pane, run.server || {});
    showBrowser(pane, run.browser || {});
    paneStatus(pane, "history: " + run.status, "");
  }

  // --- wiring -------------------------------------------------------------------------------

  $("#token-create").addEventListener("click", createToken);
  tokensBox.addEventListener("click", (e) => { if (e.target.classList.contains("revoke")) revokeToken(e.target); });
  renderHistory();
  if (!app) return;
  addMessage("user", "");
  $$("input[name=mode]").forEach((r) => r.addEventListener("change", syncMode));
  $("#compare").addEventListener("change", syncCompare);
  $("#add-message").addEventListener("click", () => addMessage("user", ""));
  $("#send").addEventListener("click", send);
  $("#stop").addEventListener("click", stop);
  $("#view-code").addEventListener("click", () => { renderCode(); $("#code").classList.toggle("pg-hidden"); });
})();
