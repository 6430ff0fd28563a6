// Hand-written glue, the only script of the console's own (see app.py's docstring):
// 1. htmx requests carry the session's CSRF token (htmx has no built-in for it);
// 2. charts: uPlot draws from the JSON a fragment carries; htmx swaps the fragment
//    every few seconds and this redraws it (uPlot has no declarative mode).
(function () {
  "use strict";
  // A live fragment's request that hangs must not stop its polling (htmx drops new
  // triggers while one is in flight): give up on it after 15 s and poll again.
  document.addEventListener("htmx:load", function () {
    if (window.htmx) { window.htmx.config.timeout = 15000; }
  });
  document.addEventListener("htmx:configRequest", function (evt) {
    evt.detail.headers["X-CSRF-Token"] = document.body.dataset.csrf || "";
  });
  var palette = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];
  function draw(root) {
    (root || document).querySelectorAll("[data-chart]").forEach(function (el) {
      if (el.dataset.drawn || typeof uPlot === "undefined") { return; }
      var spec = JSON.parse(el.querySelector("script").textContent);
      el.dataset.drawn = "1";
      try { render(el, spec); } catch (err) { console.error("chart", err); }
    });
  }
  function render(el, spec) {
      var data = [spec.x].concat(spec.series.map(function (s) { return s.values; }));
      var series = [{}].concat(spec.series.map(function (s, i) {
        return { label: s.label, stroke: palette[i % palette.length], width: 2, spanGaps: true };
      }));
      var width = Math.max(320, Math.min(el.clientWidth || 640, 900));
      var opts = { title: spec.title, width: width, height: 220, series: series,
                   axes: [{}, { label: el.dataset.unit || "" }], scales: { x: { time: true } } };
      if (spec.x.length === 0) {
        var empty = document.createElement("p");
        empty.className = "muted";
        empty.textContent = spec.title + ": collecting samples…";
        el.appendChild(empty);
        return;
      }
      new uPlot(opts, data, el);
  }
  document.addEventListener("DOMContentLoaded", function () { draw(document); });
  document.addEventListener("htmx:afterSwap", function (evt) { draw(evt.detail.elt.parentNode || document); });
  window.addEventListener("load", function () { draw(document); });
})();
