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
