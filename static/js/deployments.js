// Live status badges over /ws/deployments/ and the log tail on the detail page.
(function () {
  "use strict";
  function connect(delayMs) {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(proto + "://" + location.host + "/ws/deployments/");
    ws.onmessage = function (ev) {
      const msg = JSON.parse(ev.data);
      document.querySelectorAll('[data-status-for="' + msg.id + '"]').forEach(function (el) {
        el.textContent = msg.status_label;
        el.className = "badge status-" + msg.status;
      });
      if (document.getElementById("timeline") && String(msg.id) === location.pathname.split("/")[2]) {
        setTimeout(function () { location.reload(); }, 300);
      }
    };
    ws.onclose = function () { setTimeout(function () { connect(Math.min(delayMs * 2, 10000)); }, delayMs); };
  }
  connect(1000);
  const log = document.getElementById("log");
  if (log && log.dataset.url) {
    const poll = function () {
      fetch(log.dataset.url, { credentials: "same-origin" }).then(function (r) { return r.json(); })
        .then(function (data) { if (data.log) { log.textContent = data.log; log.scrollTop = log.scrollHeight; } })
        .catch(function () {});
    };
    poll();
    setInterval(poll, 2000);
  }
})();
