// The queue page's charts: the last hour of the broker's samples
// (/ui/queues/{queue}/history.json), drawn with uPlot and fetched again every
// sampling interval. No inline script: the pages' Content-Security-Policy
// allows scripts from the dashboard itself only.
(function () {
  "use strict";
  var root = document.getElementById("charts");
  if (!root || typeof uPlot === "undefined") { return; }
  var url = root.getAttribute("data-history");
  var every = Math.max(2, Math.min(30, parseFloat(root.getAttribute("data-interval")) || 10));
  var charts = {};

  function width() {
    return Math.max(320, root.clientWidth - 8);
  }

  function make(id, title, series, data) {
    var el = document.getElementById(id);
    var opts = {
      title: title, width: width(), height: 200,
      scales: { x: { time: true } },
      axes: [{}, { size: 60 }],
      series: [{}].concat(series)
    };
    return new uPlot(opts, data, el);
  }

  function draw(h) {
    var flow = [h.t, h.enqueued, h.completed, h.failed, h.dead];
    var depth = [h.t, h.depth];
    if (!charts.flow) {
      charts.flow = make("chart-flow", "Jobs per " + h.interval_s + " s", [
        { label: "pushed", stroke: "#3b6fd8", width: 2 },
        { label: "completed", stroke: "#2f9e44", width: 2 },
        { label: "failed", stroke: "#e8890c", width: 2 },
        { label: "dead", stroke: "#d6336c", width: 2 }
      ], flow);
      charts.depth = make("chart-depth", "Depth", [
        { label: "jobs", stroke: "#5f3dc4", width: 2, fill: "rgba(95,61,196,0.08)" }
      ], depth);
      root.setAttribute("data-ready", "yes");
    } else {
      charts.flow.setData(flow);
      charts.depth.setData(depth);
    }
    root.setAttribute("data-points", String(h.t.length));
  }

  function load() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error("HTTP " + r.status); } return r.json(); })
      .then(draw)
      .catch(function (e) { root.setAttribute("data-error", String(e)); });
  }

  window.addEventListener("resize", function () {
    for (var k in charts) { charts[k].setSize({ width: width(), height: 200 }); }
  });
  load();
  setInterval(load, every * 1000);
})();
