// Live status badges over /ws/deployments/, and the detail page's engine log over
// /ws/deployments/<pk>/log/.
(function () {
  "use strict";
  // The page reloads itself (once) when what it shows changed. A form the user is sending (a
  // Stop, a Scale) is never cut off by that reload: the form's answer is a fresh page anyway.
  // Bubbling, so a form whose confirm() was declined (default prevented) still lets it reload.
  let sending = false;
  let reloading = false;
  document.addEventListener("submit", function (ev) { if (!ev.defaultPrevented) { sending = true; } });
  function reloadSoon() {
    if (reloading) { return; }
    reloading = true;
    setTimeout(function () { if (!sending) { location.reload(); } }, 300);
  }
  // A status pushed before the socket joined (between the page's render and the socket's
  // open, or while it reconnected) is not sent again: once open, the page is compared with a
  // fresh copy of itself and reloads if a status it shows has moved on meanwhile.
  function catchUp() {
    fetch(location.href, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.text() : ""; })
      .then(function (html) {
        if (!html) { return; }
        const fresh = new DOMParser().parseFromString(html, "text/html");
        const moved = Array.prototype.some.call(document.querySelectorAll("[data-status-for]"), function (el) {
          const now = fresh.querySelector('[data-status-for="' + el.dataset.statusFor + '"]');
          return now !== null && now.textContent.trim() !== el.textContent.trim();
        });
        if (moved) { reloadSoon(); }
      })
      .catch(function () {});  // the next push or reconnect tries again
  }
  function connect(delayMs) {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(proto + "://" + location.host + "/ws/deployments/");
    ws.onopen = catchUp;
    ws.onmessage = function (ev) {
      const msg = JSON.parse(ev.data);
      if (msg.type === "deployment.progress") { progress(msg); return; }
      document.querySelectorAll('[data-status-for="' + msg.id + '"]').forEach(function (el) {
        el.textContent = msg.status_label;
        el.className = "badge status-" + msg.status;
      });
      if (msg.group) {
        document.querySelectorAll('[data-group-status="' + msg.group + '"]').forEach(function (el) {
          el.textContent = msg.group_label;
          el.className = "badge status-" + msg.group_status;
        });
        document.querySelectorAll('[data-replica-summary="' + msg.group + '"]').forEach(function (el) {
          el.textContent = msg.group_summary;
        });
      }
      if (document.getElementById("timeline") && String(msg.id) === location.pathname.split("/")[2]) {
        reloadSoon();
      }
    };
    ws.onclose = function () { setTimeout(function () { connect(Math.min(delayMs * 2, 10000)); }, delayMs); };
  }
  // A start's steps: a step's progress in place; a step not yet shown as under way reloads
  // the page (a handful of times per start).
  const steps = document.getElementById("launch-steps");
  const mib = function (n) { return (n / 1048576).toFixed(1) + " MiB"; };
  function stepText(msg) {
    if (msg.text) { return msg.text; }  // a step that words its own progress (the engine's)
    if (msg.phase === "downloading" && msg.total) {
      let text = mib(msg.done) + " of " + mib(msg.total);
      if (msg.rate_bps) { text += " · " + mib(msg.rate_bps) + "/s"; }
      if (msg.eta_s) { text += " · " + Math.round(msg.eta_s) + " s left"; }
      return text;
    }
    return msg.total ? msg.done + " of " + msg.total : "";
  }
  // Another host of a launch over several hosts fetching its copy of the weights.
  function hostWeights(msg) {
    const li = steps.querySelector('[data-host-download="' + CSS.escape(msg.node_host) + '"]');
    if (!li) {
      reloadSoon();
      return;
    }
    const bar = li.querySelector("progress");
    if (bar && msg.total) { bar.max = msg.total; bar.value = msg.done; }
    const text = li.querySelector("[data-host-text]");
    if (text) { text.textContent = stepText(msg); }
    const badge = li.querySelector("[data-host-status]");
    if (badge && msg.download_status) { badge.textContent = msg.download_status; }
  }
  function progress(msg) {
    if (msg.node_host) {  // the start's own steps and the list show the lead's progress
      if (steps && String(msg.id) === steps.dataset.pk) { hostWeights(msg); }
      return;
    }
    const pct = msg.total ? " " + Math.round(100 * msg.done / msg.total) + "%" : "";
    document.querySelectorAll('[data-progress-for="' + msg.id + '"]').forEach(function (el) {
      el.textContent = msg.phase_label + pct;
    });
    if (!steps || String(msg.id) !== steps.dataset.pk) { return; }
    const li = steps.querySelector('[data-step="' + msg.phase + '"]');
    if (!li || li.dataset.state !== "current") {
      reloadSoon();
      return;
    }
    const bar = steps.querySelector('[data-step-bar="' + msg.phase + '"]');
    if (bar && msg.total) { bar.max = msg.total; bar.value = msg.done; }
    const text = steps.querySelector('[data-step-text="' + msg.phase + '"]');
    if (text) { text.textContent = stepText(msg); }
  }
  connect(1000);
  const log = document.getElementById("log");
  if (log) { log.scrollTop = log.scrollHeight; }
  if (log && log.dataset.live === "1") {
    // The engine's lines as the host worker ships them; a reconnect asks for those after the
    // last line shown, so none is lost or shown twice.
    const note = document.getElementById("log-note");
    const maxLines = 2000;
    let count = log.textContent ? log.textContent.split("\n").length : 0;
    const append = function (lines) {
      const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 8;
      const text = lines.map(function (l) { return l[1]; }).join("\n");
      log.appendChild(document.createTextNode(count ? "\n" + text : text));
      count += lines.length;
      if (count > maxLines * 1.25) {
        log.textContent = log.textContent.split("\n").slice(-maxLines).join("\n");
        count = maxLines;
      }
      log.dataset.lastId = lines[lines.length - 1][0];
      if (note) { note.textContent = ""; }
      if (atBottom) { log.scrollTop = log.scrollHeight; }
    };
    const follow = function (delayMs) {
      const proto = location.protocol === "https:" ? "wss" : "ws";
      const after = log.dataset.lastId ? "?after=" + encodeURIComponent(log.dataset.lastId) : "";
      const ws = new WebSocket(proto + "://" + location.host + "/ws/deployments/" + log.dataset.pk + "/log/" + after);
      ws.onopen = function () { delayMs = 1000; };
      ws.onmessage = function (ev) {
        const msg = JSON.parse(ev.data);
        if (msg.type === "log.lines" && msg.lines.length) { append(msg.lines); }
        if (msg.type === "log.error" && note) { note.textContent = "Live log: " + msg.error; }
      };
      ws.onclose = function (ev) {
        if (ev.code >= 4400 && ev.code < 4500) { return; }  // refused: retrying will not help
        setTimeout(function () { follow(Math.min(delayMs * 2, 10000)); }, delayMs);
      };
    };
    follow(1000);
  }
  const memory = document.getElementById("memory");
  if (memory && memory.dataset.url) {
    const note = document.getElementById("memory-note");
    const refresh = function () {
      fetch(memory.dataset.url, { credentials: "same-origin" }).then(function (r) { return r.json(); })
        .then(function (data) {
          const body = memory.querySelector("tbody");
          body.replaceChildren();
          data.rows.forEach(function (row) {
            const tr = document.createElement("tr");
            tr.dataset.gpu = row.gpu;
            [["gpu", String(row.gpu)], ["planned", row.planned], ["measured", row.measured],
             ["difference", row.difference]].forEach(function (cell) {
              const td = document.createElement("td");
              td.textContent = cell[1];
              td.dataset.col = cell[0];
              if (cell[0] !== "gpu") { td.className = "num"; }
              tr.appendChild(td);
            });
            body.appendChild(tr);
          });
          if (note) { note.textContent = data.note; }
        })
        .catch(function () {});
    };
    setInterval(refresh, 5000);
  }
})();
