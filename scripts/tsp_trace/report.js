// report.js: draws tsp-trace's report page from the JSON in #report-data (tables, uPlot timeline and links).
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var root = document.getElementById("report");
  var KIND_COLORS = { MEM: "#1f77b4", VXM: "#ff7f0e", MXM: "#2ca02c", SXM: "#d62728", C2C: "#9467bd" };

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    (children || []).forEach(function (c) {
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return node;
  }
  function fmt(v) {
    if (typeof v === "number" && !Number.isInteger(v)) return v.toPrecision(5);
    return String(v);
  }
  function pct(v) { return (100 * v).toFixed(2) + " %"; }
  function table(id, columns, rows, cell) {
    var head = el("tr", {}, columns.map(function (c) { return el("th", {}, [c]); }));
    var body = rows.map(function (r) {
      return el("tr", {}, r.map(function (v, i) { return el("td", {}, [cell ? cell(v, i) : fmt(v)]); }));
    });
    return el("div", { "class": "scroll" }, [el("table", { id: id }, [el("thead", {}, [head]), el("tbody", {}, body)])]);
  }

  // Summary.
  var run = data.run;
  var us = run.makespan_cycles / data.clock_mhz;
  if (data.partial) {
    root.appendChild(el("p", { "class": "partial", id: "partial" },
      ["Partial trace: the run was interrupted; the figures cover the cycles reached."]));
  }
  root.appendChild(el("h2", {}, ["Summary"]));
  root.appendChild(table("summary", ["figure", "value"], [
    ["makespan", run.makespan_cycles + " cycles = " + us.toFixed(3) + " µs at " + data.clock_mhz + " MHz"],
    ["throughput (one plan copy)", fmt(run.throughput_per_second) + " samples/s"],
    ["samples per iteration", run.samples],
    ["chips", run.chips],
    ["plan", data.plan_yaml.split(/\nstages:/)[0].replace(/\n/g, " ").trim()],
    ["tool", data.tool_version]
  ], function (v) { return String(v); }));
  root.lastChild.querySelector("table").classList.add("facts");

  // Chips.
  root.appendChild(el("h2", {}, ["Chips"]));
  root.appendChild(table("chips", data.chips.columns, data.chips.rows, function (v, i) {
    return data.chips.columns[i].indexOf("util_") === 0 ? pct(v) : fmt(v);
  }));

  // Layers and the busiest ops: shares and utilisations in %.
  [["layers", "Layers"], ["ops", "Busiest ops"]].forEach(function (pair) {
    var t = data[pair[0]];
    if (!t) return;
    root.appendChild(el("h2", {}, [pair[1]]));
    root.appendChild(table(pair[0], t.columns, t.rows, function (v, i) {
      var c = t.columns[i];
      return c === "share" || c.indexOf("util_") === 0 ? pct(v) : (typeof v === "string" ? v : fmt(v));
    }));
  });

  var width = Math.max(600, Math.min(1200, window.innerWidth - 60));

  // Timeline: utilisation per unit kind over time, one chip at a time; drag to zoom, double-click to reset.
  if (data.timeline && data.timeline.shown > 0) {
    var tl = data.timeline;
    root.appendChild(el("h2", {}, ["Timeline"]));
    var chipIds = Object.keys(tl.chips);
    var select = el("select", { id: "timeline-chip" }, chipIds.map(function (c) {
      return el("option", { value: c }, ["chip " + c]);
    }));
    root.appendChild(el("p", {}, ["Chip ", select, el("span", { "class": "note" }, [
      "  busy fraction of each unit kind per " + tl.bin_cycles + "-cycle bin; drag to zoom, double-click to reset" +
      (tl.shown < tl.active ? "; the " + tl.shown + " busiest of " + tl.active + " active chips" : "")])]));
    var holder = el("div", { id: "timeline" });
    root.appendChild(holder);
    var series = [{ label: "µs" }].concat(tl.kinds.map(function (k) {
      return { label: k, stroke: KIND_COLORS[k] || "#777", width: 1.5, value: function (u, v) { return v == null ? "-" : pct(v); } };
    }));
    var opts = { width: width, height: 300, series: series, scales: { x: { time: false }, y: { range: [0, 1] } },
                 axes: [{ label: "µs" }, { label: "busy fraction", size: 80, values: function (u, vals) { return vals.map(pct); } }],
                 cursor: { drag: { x: true, y: false } } };
    var plot = new uPlot(opts, [tl.x_us].concat(tl.chips[chipIds[0]]), holder);
    select.addEventListener("change", function () { plot.setData([tl.x_us].concat(tl.chips[select.value])); });
  }

  // Links: utilisation per direction of the busiest links; drag to zoom.
  if (data.links && data.links.rows.length > 0) {
    var links = data.links;
    root.appendChild(el("h2", {}, ["Links"]));
    root.appendChild(el("p", { "class": "note" }, [
      "busy cycles over the makespan, each direction on its own; the " + links.rows.length + " busiest of " +
      links.total + " links, busiest first"]));
    var lholder = el("div", { id: "links" });
    root.appendChild(lholder);
    var xs = links.rows.map(function (r, i) { return i; });
    var lplot = new uPlot({
      width: width, height: 260, scales: { x: { time: false }, y: { range: [0, 1] } },
      series: [{ label: "rank" },
               { label: "a→b", stroke: "#1f77b4", width: 0, points: { show: true, size: 5, fill: "#1f77b4" } },
               { label: "b→a", stroke: "#ff7f0e", width: 0, points: { show: true, size: 5, fill: "#ff7f0e" } }],
      axes: [{ label: "link, by utilisation" }, { label: "utilisation", size: 80, values: function (u, vals) { return vals.map(pct); } }],
      cursor: { drag: { x: true, y: false } }
    }, [xs, links.rows.map(function (r) { return r[5]; }), links.rows.map(function (r) { return r[6]; })], lholder);
    root.appendChild(table("links-table", ["link", "a", "b", "bytes a→b", "bytes b→a", "util a→b", "util b→a"],
      links.rows, function (v, i) { return i >= 5 ? pct(v) : fmt(v); }));
    window.tspLinksPlot = lplot;
  }
  document.body.setAttribute("data-rendered", "yes");
})();
