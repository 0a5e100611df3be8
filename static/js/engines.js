// The engines each host prepares (templates/deployments/_engines.html), live over /ws/engines/:
// state, step, progress, time taken and the script's last lines, in place; on every (re)connect
// the page reads the states again from /engines/state/, so a push missed meanwhile is not lost.
// On the launch form, the chosen host and engine get a note: ready, being prepared (the launch
// will wait for it), failed or not installed.
(function () {
  "use strict";
  const card = document.getElementById("engines");
  if (!card) { return; }
  const RESYNC_MS = 5000;

  function elapsedText(startIso, endIso) {
    if (!startIso) { return ""; }
    const end = endIso ? new Date(endIso) : new Date();
    const s = Math.max(0, Math.round((end - new Date(startIso)) / 1000));
    const text = s >= 60 ? Math.floor(s / 60) + " min " + (s % 60) + " s" : s + " s";
    return endIso ? "took " + text : text + " so far";
  }

  function tick() {
    card.querySelectorAll("[data-engine-prep]").forEach(function (li) {
      const shown = li.dataset.state === "preparing" || li.dataset.state === "ready" || li.dataset.state === "failed";
      const text = shown ? elapsedText(li.dataset.startedAt, li.dataset.state === "preparing" ? "" : li.dataset.finishedAt) : "";
      li.querySelector("[data-role=elapsed]").textContent = text;
    });
  }

  function apply(msg) {
    const li = card.querySelector('[data-engine-prep="' + CSS.escape(msg.host + ":" + msg.engine) + '"]');
    if (!li) { return; }  // a host or engine this page did not render: the next load shows it
    const preparing = msg.state === "preparing";
    li.dataset.state = msg.state;
    li.dataset.startedAt = msg.started_at || "";
    li.dataset.finishedAt = msg.finished_at || "";
    const badge = li.querySelector("[data-role=state]");
    badge.textContent = msg.state_label;
    badge.className = "badge prep-" + msg.state;
    li.querySelector("[data-role=phase]").textContent = preparing ? msg.phase : "";
    const bar = li.querySelector("[data-role=bar]");
    bar.hidden = !preparing || msg.percent === null;
    bar.value = msg.percent || 0;
    li.querySelector("[data-role=progress]").textContent = msg.progress_text;
    const note = li.querySelector("[data-role=note]");
    note.textContent = msg.state === "failed" ? msg.error : msg.state === "absent" ? msg.note : "";
    note.className = msg.state === "failed" ? "error" : "muted";
    const log = li.querySelector("[data-role=log]");
    log.hidden = !msg.log_tail;
    log.querySelector("pre").textContent = msg.log_tail;
    const retry = li.querySelector("[data-role=retry]");
    if (retry) { retry.hidden = !(msg.state === "failed" || msg.state === "absent"); }
    tick();
    launchNote();
  }

  function catchUp() {
    fetch(card.dataset.stateUrl, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : { engines: [] }; })
      .then(function (data) { data.engines.forEach(apply); })
      .catch(function () {});  // the next push or reconnect tries again
  }

  // The launch form: what happens to a launch on the chosen host and engine.
  const form = document.getElementById("launch-form");
  function launchNote() {
    if (!form) { return; }
    const host = form.querySelector("[name=host]");
    const engine = form.querySelector("[name=engine]");
    const note = document.getElementById("engine-note");
    if (!host || !engine || !note) { return; }
    const li = card.querySelector('[data-engine-prep="' + CSS.escape(host.value + ":" + engine.value) + '"]');
    if (!li) { note.textContent = ""; note.dataset.state = ""; return; }
    const name = li.querySelector("strong").textContent;
    const progress = li.querySelector("[data-role=progress]").textContent;
    const texts = {
      ready: "",
      preparing: name + " is still being prepared on " + host.value + (progress ? " (" + progress + ")" : "") +
        ": a launch now waits for it, then starts. Or choose an engine that is ready.",
      failed: name + " could not be prepared on " + host.value + ": retry it below, or choose another engine.",
      absent: name + " is not installed on " + host.value + ": choose another engine.",
    };
    note.textContent = texts[li.dataset.state] || "";
    note.dataset.state = li.dataset.state;
  }
  if (form) { form.addEventListener("change", launchNote); }

  function connect(delayMs) {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(proto + "://" + location.host + "/ws/engines/");
    ws.onopen = function () { delayMs = 1000; catchUp(); };
    ws.onmessage = function (ev) { apply(JSON.parse(ev.data)); };
    ws.onclose = function () { setTimeout(function () { connect(Math.min(delayMs * 2, 10000)); }, delayMs); };
  }
  tick();
  launchNote();
  setInterval(tick, 1000);
  // Pushes are best effort (deployments/live/prep.py): while an engine is being prepared the
  // page also reads the states every few seconds, so a push that never came (seen under load,
  // its cause not found) leaves a row behind for seconds, not for the rest of a build.
  setInterval(function () {
    if (card.querySelector('[data-engine-prep][data-state="preparing"]')) { catchUp(); }
  }, RESYNC_MS);
  connect(1000);
})();
