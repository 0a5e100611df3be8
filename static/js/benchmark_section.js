// The deployment page's Benchmarks section: plan vs measured and the latest runs (an HTML
// fragment from the benchmarks app, so the deployment page's own view does not change).
(function () {
  "use strict";
  const box = document.getElementById("benchmarks");
  if (!box || !box.dataset.url) { return; }
  fetch(box.dataset.url, { credentials: "same-origin" })
    .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
    .then(function (html) { box.innerHTML = html; })
    .catch(function () { box.textContent = "Benchmarks could not be loaded."; });
})();
