// The dashboard's own script. No inline script: the pages' Content-Security-Policy
// allows scripts from the dashboard itself only. Every page works without it; each
// part below does nothing on a page that lacks what it works on:
// - times: each <time datetime> says how long ago (or how soon) it is, as the
//   broker says it, kept current on the broker's clock (the page's data-now);
// - the job table: select-all, and the boxes ticked kept ticked when the table
//   refreshes itself (htmx, every 5 s);
// - the charts: the last hour of the broker's samples
//   (/ui/queues/{queue}/history.json), drawn with uPlot and fetched again every
//   sampling interval; a note instead while there are none.
(function () {
  "use strict";

  // -- times ------------------------------------------------------------------
  var served = parseFloat(document.body.getAttribute("data-now"));
  var skew = isNaN(served) ? 0 : served - Date.now();  // the broker's clock minus ours (ms)

  // The same words as broker.http.ui.app.relative.
  function relative(ms, now) {
    var seconds = (now - ms) / 1000;
    if (Math.abs(seconds) < 1) { return "just now"; }
    var s = Math.floor(Math.abs(seconds));
    var text = s < 60 ? s + " s" : s < 3600 ? Math.floor(s / 60) + " min" :
      s < 86400 ? Math.floor(s / 3600) + " h" : Math.floor(s / 86400) + " d";
    return seconds > 0 ? text + " ago" : "in " + text;
  }

  function tick() {
    var now = Date.now() + skew;
    var times = document.querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var at = Date.parse(times[i].getAttribute("datetime"));
      if (!isNaN(at)) { times[i].textContent = relative(at, now); }
    }
  }
  setInterval(tick, 5000);

  // -- the job table ------------------------------------------------------------
  var table = document.getElementById("job-table");
  if (table) {
    var kept = null;
    var boxes = function () { return table.querySelectorAll('input[name="ids"]'); };
    var sync = function () {
      var all = table.querySelector("[data-select-all]");
      if (!all) { return; }
      var list = boxes(), on = 0;
      for (var i = 0; i < list.length; i++) { if (list[i].checked) { on++; } }
      all.hidden = list.length === 0;
      all.checked = list.length > 0 && on === list.length;
      all.indeterminate = on > 0 && on < list.length;
    };
    table.addEventListener("change", function (e) {
      if (e.target.hasAttribute("data-select-all")) {
        var list = boxes();
        for (var i = 0; i < list.length; i++) { list[i].checked = e.target.checked; }
      }
      sync();
    });
    document.body.addEventListener("htmx:beforeSwap", function (e) {
      if (e.detail.target !== table) { return; }
      kept = {};
      var list = boxes();
      for (var i = 0; i < list.length; i++) { if (list[i].checked) { kept[list[i].value] = true; } }
    });
    document.body.addEventListener("htmx:afterSwap", function (e) {
      if (e.detail.target !== table) { return; }
      var list = boxes();
      for (var i = 0; i < list.length; i++) { if (kept && kept[list[i].value]) { list[i].checked = true; } }
      kept = null;
      sync();
      table.setAttribute("data-refreshed", String(Date.now()));
    });
    sync();
  }

  // -- the charts ---------------------------------------------------------------
  var root = document.getElementById("charts");
  if (!root || typeof uPlot === "undefined") { return; }
  var url = root.getAttribute("data-history");
  var interval = parseFloat(root.getAttribute("data-interval")) || 10;
  var every = Math.max(2, Math.min(30, interval));
  var empty = document.getElementById("charts-empty");
  var charts = {};

  function width() {
    return Math.max(320, root.clientWidth - 8);
  }

  // The time axis: the samples' span, at least ten sampling intervals wide, ending
  // at the last sample. Set here, not by uPlot: for one sample its own spans years.
  function xSpan(t) {
    var last = t[t.length - 1];
    return { min: last - Math.max(last - t[0], 10 * interval), max: last };
  }

  // From 0; with nothing but zeros, 0 to 1.
  function yRange(u, min, max) {
    return [0, max > 0 ? max * 1.1 : 1];
  }

  function make(id, title, series, data) {
    var el = document.getElementById(id);
    var opts = {
      title: title, width: width(), height: 200,
      scales: { x: { time: true, auto: false }, y: { range: yRange } },
      axes: [{}, { size: 60 }],
      series: [{}].concat(series),
      hooks: { setScale: [function (u, key) {
        if (key === "x") { el.setAttribute("data-x-range", u.scales.x.min + " " + u.scales.x.max); }
      }] }
    };
    return new uPlot(opts, data, el);
  }

  function draw(h) {
    interval = h.interval_s || interval;
    root.setAttribute("data-points", String(h.t.length));
    var none = h.t.length === 0;
    if (empty) { empty.hidden = !none; }
    for (var k in charts) { charts[k].root.hidden = none; }
    if (none) { return; }
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
    var span = xSpan(h.t);
    charts.flow.setScale("x", span);
    charts.depth.setScale("x", span);
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
