// The runs page's script (ascendpipe report): inlined into runs.html.j2 by explorer/page.py; no Jinja here.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("data").textContent);
  var SVGNS = "http://www.w3.org/2000/svg";
  var PALETTE = ["#1f6fb4", "#e8710a", "#2a9d4b", "#c0392b", "#8e5cc2", "#8c564b", "#d65fa8", "#6b7280", "#b5a300", "#17a2b8"];
  var runsById = {};
  D.runs.forEach(function (r) { runsById[r.id] = r; });

  function $(id) { return document.getElementById(id); }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in (attrs || {})) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in (attrs || {})) e.setAttribute(k, attrs[k]);
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "—";
    if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(parseFloat(v.toPrecision(6)));
    return String(v);
  }
  function niceTicks(lo, hi, count) {
    var span = hi - lo, step = Math.pow(10, Math.floor(Math.log10(span / count)));
    [1, 2, 5, 10].some(function (m) { if (span / (step * m) <= count) { step = step * m; return true; } return false; });
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return out;
  }
  // [low end, ticks, decimals] of a cosine axis reaching down to `low`: round steps, at most 6 ticks
  function roundCosineTicks(low) {
    low = Math.max(-1, Math.min(low, 0.99));
    var steps = [0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5], step = 0.5, lo = -1;
    for (var i = 0; i < steps.length; i++) {
      var l = Math.floor(+(low / steps[i]).toFixed(9)) * steps[i];
      if ((1 - l) / steps[i] <= 5 + 1e-9) { step = steps[i]; lo = l; break; }
    }
    lo = Math.max(-1, lo);
    var ticks = [], n = Math.round((1 - lo) / step);
    for (var k = 0; k <= n; k++) ticks.push(+(lo + k * step).toFixed(6));
    var dec = Math.max(1, -Math.floor(Math.log10(step)) + (Math.abs(step / Math.pow(10, Math.floor(Math.log10(step))) - 2.5) < 1e-6 ? 1 : 0));
    return [lo, ticks, dec];
  }
  function option(sel, value, text) { var o = el("option", {value: value}, text); sel.appendChild(o); return o; }
  function hashParams() {
    var out = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (part) {
      var i = part.indexOf("="); if (i > 0) out[decodeURIComponent(part.slice(0, i))] = decodeURIComponent(part.slice(i + 1));
    });
    return out;
  }
  var H = hashParams();

  // ---- sticky first columns ------------------------------------------------------------------
  function stickyColumns() {
    Array.prototype.forEach.call(document.querySelectorAll("table[data-sticky]"), function (table) {
      var n = +table.getAttribute("data-sticky"), head = table.tHead.rows[0], left = 0, lefts = [];
      for (var i = 0; i < n && i < head.cells.length; i++) { lefts.push(left); left += head.cells[i].getBoundingClientRect().width; }
      Array.prototype.forEach.call(table.rows, function (row) {
        for (var i = 0; i < lefts.length && i < row.cells.length; i++) {
          var c = row.cells[i]; c.classList.add("stick"); c.style.left = lefts[i] + "px";
          c.classList.toggle("last-stick", i === lefts.length - 1);
        }
      });
    });
  }

  // ---- sorting and filtering ----------------------------------------------------------------
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    var headers = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(headers, function (th, col) {
      if (th.hasAttribute("data-nosort")) return;
      th.addEventListener("click", function () {
        var asc = !th.classList.contains("asc");
        Array.prototype.forEach.call(headers, function (h) { h.classList.remove("asc", "desc"); });
        th.classList.add(asc ? "asc" : "desc");
        var numeric = th.getAttribute("data-type") === "num";
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        function key(row) {
          var c = row.cells[col]; var s = c.hasAttribute("data-sort") ? c.getAttribute("data-sort") : c.textContent.trim();
          if (!numeric) return s;
          var f = parseFloat(s); return isNaN(f) ? null : f;
        }
        rows.sort(function (a, b) {
          var x = key(a), y = key(b);
          if (numeric) { if (x === null) return 1; if (y === null) return -1; return asc ? x - y : y - x; }
          return asc ? x.localeCompare(y) : y.localeCompare(x);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  function applyFilter() {
    var terms = $("filter").value.toLowerCase().split(/\s+/).filter(Boolean);
    var tables = [$("runs-table")].concat(Array.prototype.slice.call(document.querySelectorAll("table.variants")));
    tables.forEach(function (table) {
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        var text = row.textContent.toLowerCase();
        row.classList.toggle("hidden", !terms.every(function (t) { return text.indexOf(t) >= 0; }));
      });
    });
  }
  $("filter").addEventListener("input", function () { applyFilter(); if (window.renderChart) window.renderChart(); });
  if (H.filter) { $("filter").value = H.filter; applyFilter(); }

  // ---- diff -----------------------------------------------------------------------------------
  var runIds = D.runs.map(function (r) { return r.id; });
  ["diff-a", "diff-b"].forEach(function (id) {
    D.runs.forEach(function (r) { option($(id), r.id, "run " + r.id + " · " + r.pipeline + " · " + (r.started || "")); });
  });
  function differs(a, b, what) {
    // a param counts where both runs built the stage (a partial run lacks the others: not a change of setting)
    return diffRows(a, b).some(function (r) { return r.changed && what.indexOf(r.what) >= 0 && (r.what !== "param" || (r.a !== undefined && r.b !== undefined)); });
  }
  function defaultPair() {
    // the newest run and the latest run before it (same pipeline) whose params differ (a setting
    // moved), else whose metrics differ; else such a pair further back; else the two newest runs
    if (runIds.length < 2) return [runIds[0], runIds[0]];
    // the runs that finished (a crashed, failed or interrupted run holds what it got to, not a result)
    var good = D.runs.filter(function (r) { return r.state === "done"; });
    var runs = good.length >= 2 ? good : D.runs;
    var found = null;
    [["param"], ["metric"]].some(function (what) {
      for (var i = 0; i < Math.min(runs.length, 40); i++) {  // bounded: a page of 1000 runs opens at once
        var b = runs[i];
        var older = runs.slice(i + 1).filter(function (r) { return r.pipeline === b.pipeline; }).slice(0, 40);
        for (var j = 0; j < older.length; j++) if (differs(older[j], b, what)) { found = [older[j].id, b.id]; return true; }
      }
      return false;
    });
    return found || [runs[1].id, runs[0].id];
  }
  var pair = defaultPair();
  if (H.diff) { var p = H.diff.split(","); if (runsById[p[0]] && runsById[p[1]]) pair = [+p[0], +p[1]]; }
  $("diff-a").value = pair[0]; $("diff-b").value = pair[1];

  // runs of two pipeline files: only the stages both have are compared, as `ascendpipe diff` does
  function leftOut(a, b) {
    if (a.pipeline === b.pipeline) return [];
    return Object.keys(a.stages).filter(function (n) { return !(n in b.stages); })
      .concat(Object.keys(b.stages).filter(function (n) { return !(n in a.stages); }));
  }
  function diffRows(a, b) {
    var names = Object.keys(a.stages);
    Object.keys(b.stages).forEach(function (n) { if (names.indexOf(n) < 0) names.push(n); });
    var left = leftOut(a, b);
    names = names.filter(function (n) { return left.indexOf(n) < 0; });
    var out = [];
    names.forEach(function (name) {
      var sa = a.stages[name] || {params: {}, metrics: {}}, sb = b.stages[name] || {params: {}, metrics: {}};
      // ran, restored and fresh all mean "built": only a stage missing, failed or skipped on one side is a change
      var built = function (st) { return ["ran", "restored", "fresh"].indexOf(st) >= 0; };
      var stA = a.stages[name] ? sa.state : "(not in run)", stB = b.stages[name] ? sb.state : "(not in run)";
      if (stA !== stB) out.push({stage: name, what: "state", name: "", a: stA, b: stB, changed: !(built(stA) && built(stB))});
      ["params", "metrics"].forEach(function (section) {
        var pa = sa[section] || {}, pb = sb[section] || {};
        var keys = Object.keys(pa); Object.keys(pb).forEach(function (k) { if (keys.indexOf(k) < 0) keys.push(k); });
        keys.sort().forEach(function (k) {
          var va = pa[k], vb = pb[k];
          var row = {stage: name, what: section === "params" ? "param" : "metric", name: k, a: va, b: vb, changed: JSON.stringify(va) !== JSON.stringify(vb)};
          if (typeof va === "number" && typeof vb === "number") row.delta = vb - va;
          out.push(row);
        });
      });
      var ra = (sa.remedy || []).map(function (f) { return f.name + ":" + f.hash.slice(0, 8); }).join(", ");
      var rb = (sb.remedy || []).map(function (f) { return f.name + ":" + f.hash.slice(0, 8); }).join(", ");
      if (ra || rb) out.push({stage: name, what: "remedy", name: "files", a: ra || "—", b: rb || "—", changed: ra !== rb});
    });
    return out;
  }
  function renderDiff() {
    var a = runsById[$("diff-a").value], b = runsById[$("diff-b").value];
    var body = $("diff-table").tBodies[0]; body.innerHTML = "";
    if (!a || !b) return;
    var rows = diffRows(a, b), onlyChanged = $("diff-changed").checked;
    var nParams = rows.filter(function (r) { return r.changed && r.what === "param"; }).length;
    var nMetrics = rows.filter(function (r) { return r.changed && r.what === "metric"; }).length;
    var left = leftOut(a, b), common = Object.keys(a.stages).filter(function (n) { return n in b.stages; }).length;
    $("diff-summary").textContent = a.pipeline !== b.pipeline && !common ?
      "run " + a.id + " → run " + b.id + ": different pipelines (" + a.pipeline + ", " + b.pipeline + ") with no stage of the same name: nothing to compare" :
      "run " + a.id + " → run " + b.id + ": " + nParams + " param(s) and " + nMetrics + " metric(s) differ" +
      (a.pipeline !== b.pipeline ? " (different pipelines: " + a.pipeline + ", " + b.pipeline + "; only the " + common +
       " stage(s) of the same name are compared, " + left.length + " left out)" : "");
    $("diff-cmd").innerHTML = "";
    $("diff-cmd").appendChild(el("code", {}, "ascendpipe diff " + a.id + " " + b.id));
    $("diff-cmd").appendChild(document.createTextNode(" · get B back: "));
    $("diff-cmd").appendChild(el("code", {}, "ascendpipe checkout " + b.id));
    rows.forEach(function (r) {
      if (onlyChanged && !r.changed) return;
      var tr = el("tr", {"class": r.changed ? "changed" : "", "data-stage": r.stage, "data-name": r.name});
      tr.appendChild(el("td", {}, r.changed ? "≠" : ""));
      tr.appendChild(el("td", {}, r.stage)); tr.appendChild(el("td", {}, r.what)); tr.appendChild(el("td", {}, r.name));
      tr.appendChild(el("td", {"class": r.changed ? "changed" : ""}, fmt(r.a)));
      tr.appendChild(el("td", {"class": r.changed ? "changed" : ""}, fmt(r.b)));
      tr.appendChild(el("td", {"class": "num"}, r.delta === undefined ? "" : (r.delta > 0 ? "+" : "") + fmt(r.delta)));
      body.appendChild(tr);
    });
    if (!body.rows.length) body.appendChild(el("tr", {}, "")).appendChild(el("td", {colspan: 7}, "no params or metrics differ"));
    Array.prototype.forEach.call($("runs-table").tBodies[0].rows, function (row) {
      row.classList.toggle("picked-a", row.getAttribute("data-run") == a.id);
      row.classList.toggle("picked-b", row.getAttribute("data-run") == b.id);
    });
  }
  ["diff-a", "diff-b", "diff-changed"].forEach(function (id) { $(id).addEventListener("change", renderDiff); });
  Array.prototype.forEach.call(document.querySelectorAll("button.pick"), function (btn) {
    btn.addEventListener("click", function () {
      $(btn.getAttribute("data-pick") === "a" ? "diff-a" : "diff-b").value = btn.getAttribute("data-run");
      renderDiff();
      $("diff").scrollIntoView({behavior: "smooth"});
    });
  });
  renderDiff();

  // ---- metric by setting ----------------------------------------------------------------------
  D.metricColumns.forEach(function (k) { option($("chart-metric"), k, k); });
  var multi = {};
  D.rows.forEach(function (r) { multi[r.run] = (multi[r.run] || 0) + 1; });
  option($("chart-run"), "all", "all runs");
  D.runs.forEach(function (r) { if (multi[r.id] > 1) option($("chart-run"), r.id, "run " + r.id + " (" + multi[r.id] + " variants)"); });
  option($("chart-colour"), "", "nothing");
  D.settingColumns.forEach(function (k) { option($("chart-colour"), k, k); });
  var firstMulti = D.runs.filter(function (r) { return multi[r.id] > 1 && r.state === "done"; })[0] ||
                   D.runs.filter(function (r) { return multi[r.id] > 1; })[0];
  $("chart-run").value = firstMulti ? firstMulti.id : "all";
  if (H.chartrun && $("chart-run").querySelector('option[value="' + H.chartrun + '"]')) $("chart-run").value = H.chartrun;
  if (D.metricDefault) $("chart-metric").value = D.metricDefault;  // the key metric of the eval task
  if (H.metric && D.metricColumns.indexOf(H.metric) >= 0) $("chart-metric").value = H.metric;
  $("chart-colour").value = D.colourDefault || "";  // a setting the rows set to different values, else nothing
  (function () {  // several pipelines: the defaults must be what the chosen run's rows have
    if ($("chart-run").value === "all") return;
    var mine = D.rows.filter(function (r) { return String(r.run) === $("chart-run").value; });
    var has = function (k) { return mine.some(function (r) { return typeof r.metrics[k] === "number"; }); };
    if (!H.metric && !has($("chart-metric").value)) {
      var found = D.metricColumns.filter(has)[0]; if (found) $("chart-metric").value = found;
    }
    var varies = function (k) {
      var seen = {}; mine.forEach(function (r) { seen[k in r.settings ? r.settings[k] : "\u2014"] = true; });
      return Object.keys(seen).length > 1;
    };
    if ($("chart-colour").value && !varies($("chart-colour").value)) {
      $("chart-colour").value = D.settingColumns.filter(varies)[0] || "";
    }
  })();

  function renderChart() {
    var metric = $("chart-metric").value, runSel = $("chart-run").value, colourBy = $("chart-colour").value;
    var box = $("chart-svg"); box.innerHTML = ""; $("chart-legend").innerHTML = "";
    if (!metric) { box.appendChild(el("p", {"class": "note"}, "No numeric metrics recorded.")); return; }
    var terms = $("filter").value.toLowerCase().split(/\s+/).filter(Boolean);
    var rows = D.rows.filter(function (r) {
      if (!(runSel === "all" || String(r.run) === runSel) || typeof r.metrics[metric] !== "number") return false;
      var text = ("run " + r.run + " " + r.pipeline + " " + r.variant + " " + Object.keys(r.settings).map(function (k) { return r.settings[k]; }).join(" ")).toLowerCase();
      return terms.every(function (t) { return text.indexOf(t) >= 0; });
    });
    if ($("chart-sort").checked) rows.sort(function (a, b) { return b.metrics[metric] - a.metrics[metric]; });
    if (!rows.length) { box.appendChild(el("p", {"class": "note"}, "No row has " + metric + (terms.length ? " among the rows the filter keeps." : "."))); return; }
    if (terms.length) $("chart-legend").appendChild(el("div", {"class": "note"}, "rows kept by the filter “" + $("filter").value + "”: " + rows.length));
    var base = metric.split(".")[0], name = metric.slice(base.length + 1), kind = D.kinds[base];
    var shownRuns = {}; rows.forEach(function (r) { shownRuns[r.run] = true; });
    var refs = [], seen = {};
    D.references.forEach(function (f) {
      if (f.kind === kind && f.metric === name && shownRuns[f.run] && !seen[f.stage + f.value]) { seen[f.stage + f.value] = 1; refs.push(f); }
    });
    var values = rows.map(function (r) { return r.metrics[metric]; }).concat(refs.map(function (f) { return f.value; }));
    var vmin = Math.min.apply(null, values), hi = Math.max.apply(null, values);
    var lo = $("chart-zero").checked ? Math.min(0, vmin) : vmin - (hi - vmin) * 0.05;
    if (hi === lo) { lo = lo - Math.abs(lo || 1) * 0.05; hi = hi + Math.abs(hi || 1) * 0.05; }
    var colours = {}, nColours = 0;
    function colourOf(r) {
      if (!colourBy) return PALETTE[0];
      var v = r.settings[colourBy] === undefined ? "(unset)" : r.settings[colourBy];
      if (!(v in colours)) colours[v] = PALETTE[nColours++ % PALETTE.length];
      return colours[v];
    }
    var labelW = 330, W = 1060, barH = 18, gap = 5, top = 26 + 12 * Math.max(0, refs.length - 1), plotW = W - labelW - 90;
    var Hh = top + rows.length * (barH + gap) + 24;
    var svg = sv("svg", {width: W, height: Hh, viewBox: "0 0 " + W + " " + Hh, id: "chart-plot", "font-size": "12"});
    function x(v) { return labelW + plotW * (v - lo) / (hi - lo); }
    niceTicks(lo, hi, 6).forEach(function (tv) {
      var tx = x(tv);
      svg.appendChild(sv("line", {x1: tx, x2: tx, y1: top - 4, y2: Hh - 20, stroke: "#eceff3"}));
      svg.appendChild(sv("text", {x: tx, y: Hh - 6, "text-anchor": "middle", fill: "#6b7280"}, fmt(parseFloat(tv.toPrecision(6)))));
    });
    svg.appendChild(sv("text", {x: labelW, y: 14, fill: "#1f2328", "font-weight": "600"}, metric));
    var multipleRuns = Object.keys(shownRuns).length > 1;
    rows.forEach(function (r, i) {
      var y = top + i * (barH + gap), v = r.metrics[metric];
      var label = (multipleRuns || r.variant === "—" ? "run " + r.run + " · " : "") + r.variant;
      if (colourBy && r.settings[colourBy] !== undefined && r.variant.indexOf(r.settings[colourBy]) < 0) label += "  (" + r.settings[colourBy] + ")";
      var g = sv("g", {"class": "bar-row", "data-run": r.run, "data-variant": r.variant});
      g.appendChild(sv("text", {x: labelW - 8, y: y + barH - 5, "text-anchor": "end", fill: "#1f2328"}, label.length > 52 ? label.slice(0, 51) + "…" : label));
      var zero = x(Math.max(lo, Math.min(0, hi)));
      var rect = sv("rect", {x: Math.min(x(v), zero), y: y, width: Math.max(1, Math.abs(x(v) - zero)), height: barH, fill: colourOf(r), "class": "bar"});
      rect.appendChild(sv("title", {}, "run " + r.run + " · " + r.variant + "\n" + metric + " = " + fmt(v) + "\n" +
        Object.keys(r.settings).filter(function (k) { return D.settingColumns.indexOf(k) >= 0; }).map(function (k) { return k + " = " + r.settings[k]; }).join("\n")));
      g.appendChild(rect);
      g.appendChild(sv("text", {x: x(v) + 5, y: y + barH - 5, fill: "#1f2328"}, fmt(v)));
      svg.appendChild(g);
    });
    refs.forEach(function (f, i) {
      var rx = x(f.value);
      svg.appendChild(sv("line", {x1: rx, x2: rx, y1: top - 6, y2: Hh - 20, stroke: "#111", "stroke-dasharray": "5 4", "class": "reference"}));
      var right = rx > labelW + plotW * 0.6;
      svg.appendChild(sv("text", {x: right ? rx - 4 : rx + 4, y: top - 8 - 12 * i, fill: "#111", "text-anchor": right ? "end" : "start"},
        f.stage + (multipleRuns ? " (run " + f.run + ")" : "") + " " + fmt(f.value)));
    });
    box.appendChild(svg);
    if (!colourBy) {  // every chart has a legend: what a bar is, and the dashed lines
      var s0 = el("span"); s0.appendChild(el("span", {"class": "swatch", style: "background:" + PALETTE[0]})); s0.appendChild(document.createTextNode("bar: " + metric + " of one variant row"));
      $("chart-legend").appendChild(s0);
    }
    if (refs.length) {
      var s1 = el("span"); s1.appendChild(el("span", {"class": "swatch", style: "border-left: 2px dashed #111; width: 6px"})); s1.appendChild(document.createTextNode("dashed: the same metric of a stage outside the matrix"));
      $("chart-legend").appendChild(s1);
    }
    Object.keys(colours).forEach(function (v) {
      var s = el("span"); s.appendChild(el("span", {"class": "swatch", style: "background:" + colours[v]})); s.appendChild(document.createTextNode(colourBy + " = " + v));
      $("chart-legend").appendChild(s);
    });
  }
  window.renderChart = renderChart;
  ["chart-metric", "chart-run", "chart-colour", "chart-sort", "chart-zero"].forEach(function (id) { $(id).addEventListener("change", renderChart); });
  renderChart();

  // ---- per-op overlay --------------------------------------------------------------------------
  var compares = [];
  D.runs.forEach(function (r) {
    Object.keys(r.stages).forEach(function (n) { if (r.stages[n].curve) compares.push({id: r.id + ":" + n, run: r.id, stage: n, curve: D.curves[r.stages[n].curve]}); });
  });
  var byId = {}; compares.forEach(function (c) { byId[c.id] = c; });
  ["overlay-a", "overlay-b"].forEach(function (id) { compares.forEach(function (c) { option($(id), c.id, "run " + c.run + " · " + c.stage); }); });
  (function defaults() {
    if (!compares.length) return;
    // the two compare stages that differ most (shape.overlay_default), unless the URL names two
    var d = D.overlayDefault || [], a = byId[d[0]] ? d[0] : compares[0].id, b = byId[d[1]] ? d[1] : (compares[1] || compares[0]).id;
    var wanted = (H.overlay || "").split(",");
    $("overlay-a").value = byId[wanted[0]] ? wanted[0] : a;
    $("overlay-b").value = byId[wanted[1]] ? wanted[1] : b;
  })();

  function mergedOrder(a, b) {
    var order = a.ops.slice(), at = {};
    order.forEach(function (op, i) { at[op] = i; });
    var after = -1;
    b.ops.forEach(function (op) {
      if (op in at) { after = order.indexOf(op); return; }
      order.splice(after + 1, 0, op); after += 1;
      at = {}; order.forEach(function (o, i) { at[o] = i; });
    });
    return order;
  }
  function isFloat(c, j) { return !c["float"] || c["float"][j] !== false; }  // an int tensor: no rel. error on the log axis
  function renderOverlay() {
    var box = $("overlay-svg"); box.innerHTML = "";
    var body = $("overlay-top").tBodies[0]; body.innerHTML = "";
    var A = byId[$("overlay-a").value], B = byId[$("overlay-b").value];
    if (!A || !B) return;
    var order = mergedOrder(A.curve, B.curve), pos = {};
    order.forEach(function (op, i) { pos[op] = i; });
    var n = Math.max(order.length, 2);
    var W = 1060, L = 62, R = 20, panelH = 190, gapH = 34, T = 24;
    var plotW = W - L - R, Hh = T + panelH * 2 + gapH + 46;
    function x(i) { return L + plotW * i / (n - 1); }
    var allCos = [], allRel = [];
    [A, B].forEach(function (s) {
      s.curve.cosine.forEach(function (v) { if (v !== null) allCos.push(v); });
      s.curve.max_rel_error.forEach(function (v, j) { if (v !== null && isFloat(s.curve, j)) allRel.push(Math.log10(Math.max(v, 1e-8))); });
    });
    var cosTicks = roundCosineTicks(Math.min.apply(null, allCos.concat([0.9]))), cLo = cosTicks[0];
    var rLo = Math.floor(Math.min.apply(null, allRel.concat([-4]))), rHi = Math.ceil(Math.max.apply(null, allRel.concat([rLo + 1])));
    // a passing op's large error (near-zero golden values) may not squeeze the failing ops' range:
    // clip the axis a decade above the largest failing error when passing ops go 3+ decades beyond it
    var failRel = [];
    [A, B].forEach(function (s) { s.curve.max_rel_error.forEach(function (v, j) { if (v !== null && s.curve.failed[j]) failRel.push(Math.log10(Math.max(v, 1e-8))); }); });
    var clipped = null;
    if (failRel.length && rHi - Math.ceil(Math.max.apply(null, failRel)) >= 3) { clipped = Math.max(Math.ceil(Math.max.apply(null, failRel)) + 1, rLo + 1); rHi = clipped; }
    function onScale(v) { return v !== null && (clipped === null || Math.log10(Math.max(v, 1e-8)) <= clipped); }
    var top1 = T, top2 = T + panelH + gapH;
    function yC(v) { return top1 + panelH * (1 - (v - cLo) / (1 - cLo)); }
    function yR(v) { return top2 + panelH * (1 - (Math.log10(Math.max(v, 1e-8)) - rLo) / (rHi - rLo)); }
    var svg = sv("svg", {width: W, height: Hh, viewBox: "0 0 " + W + " " + Hh, id: "overlay-plot", "font-size": "11"});
    [[top1, "cosine similarity", "cosine"], [top2, "max relative error (log)", "max rel. error"]].forEach(function (p) {
      svg.appendChild(sv("rect", {x: L, y: p[0], width: plotW, height: panelH, fill: "#fbfcfd", stroke: "#d9dde3"}));
      svg.appendChild(sv("text", {x: L, y: p[0] - 6, fill: "#1f2328", "font-weight": "600"}, p[1]));
      var cy = p[0] + panelH / 2;
      svg.appendChild(sv("text", {x: 12, y: cy, "text-anchor": "middle", transform: "rotate(-90 12 " + cy + ")", "class": "axis-title y-axis"}, p[2]));
    });
    cosTicks[1].forEach(function (cv) {
      svg.appendChild(sv("line", {x1: L, x2: L + plotW, y1: yC(cv), y2: yC(cv), stroke: "#eceff3"}));
      svg.appendChild(sv("text", {x: L - 6, y: yC(cv) + 4, "text-anchor": "end", fill: "#6b7280", "class": "cos-tick"}, cv.toFixed(cosTicks[2])));
    });
    for (var e = rLo; e <= rHi; e++) {
      svg.appendChild(sv("line", {x1: L, x2: L + plotW, y1: yR(Math.pow(10, e)), y2: yR(Math.pow(10, e)), stroke: "#eceff3"}));
      svg.appendChild(sv("text", {x: L - 6, y: yR(Math.pow(10, e)) + 4, "text-anchor": "end", fill: "#6b7280"}, (e === clipped ? "≥" : "") + "1e" + e));
    }
    var step = Math.max(1, Math.ceil(n / 12));
    for (var i = 0; i < order.length; i += step) svg.appendChild(sv("text", {x: x(i), y: Hh - 20, "text-anchor": "middle", fill: "#6b7280"}, String(i)));
    svg.appendChild(sv("text", {x: L + plotW / 2, y: Hh - 5, "text-anchor": "middle", "class": "axis-title x-axis"}, "op index, in graph order (ops both sides compared) →"));
    [[A, "a", "var(--a)", "#1f6fb4"], [B, "b", "var(--b)", "#e8710a"]].forEach(function (s) {
      var c = s[0].curve, colour = s[3];
      var ff = c.first_failure && c.first_failure.op_name;
      if (ff && ff in pos) {
        svg.appendChild(sv("line", {x1: x(pos[ff]), x2: x(pos[ff]), y1: top1, y2: top2 + panelH, stroke: colour, "stroke-dasharray": "4 3", "class": "first-failure"}));
      }
      // one polyline per run of finite values: a NaN (an op whose tensor holds inf/NaN) is a gap,
      // not a line drawn through it
      function segments(values, y, shown) {
        var out = [], cur = [];
        c.ops.forEach(function (op, j) {
          if (values[j] === null || (shown && !shown(values[j], j))) { if (cur.length) out.push(cur); cur = []; return; }
          cur.push(x(pos[op]).toFixed(1) + "," + y(values[j]).toFixed(1));
        });
        if (cur.length) out.push(cur);
        return out;
      }
      // A wide and light, B dashed on top: where the two coincide both stay visible
      var look = s[1] === "a" ? {"stroke-width": 3.5, "stroke-opacity": 0.55} : {"stroke-width": 1.6, "stroke-dasharray": "6 4"};
      function line(pts, k, cls) {
        var attrs = {points: pts.join(" "), fill: "none", stroke: colour, "class": "curve " + cls, "data-series": s[1], "data-segment": k};
        Object.keys(look).forEach(function (a) { attrs[a] = look[a]; });
        svg.appendChild(sv("polyline", attrs));
      }
      segments(c.cosine, yC).forEach(function (pts, k) { line(pts, k, "curve-cosine"); });
      segments(c.max_rel_error, yR, function (v, j) { return isFloat(c, j) && onScale(v); }).forEach(function (pts, k) { line(pts, k, "curve-rel"); });
      c.ops.forEach(function (op, j) {
        var fails = c.failed[j], cos = c.cosine[j], rel = c.max_rel_error[j], flt = isFloat(c, j);
        var tip = "#" + pos[op] + " " + op + " (" + c.types[j] + ")\n" + s[1].toUpperCase() + ": cosine " +
          (cos === null ? "NaN (the tensor holds inf/NaN)" : fmt(cos)) + ", max rel " +
          (!flt ? (rel === null ? "—" : fmt(rel)) + " (an integer tensor: not plotted)" :
           rel === null ? "inf/NaN (not computed)" : fmt(rel) + (onScale(rel) ? "" : " (beyond the axis)")) + (fails ? "\nFAILS the thresholds" : "");
        var cls = (fails ? "fail-mark " : "") + "series-" + s[1];
        // no cosine: a mark at the bottom edge of the cosine panel (filled when the op fails)
        var dot = sv("circle", {cx: x(pos[op]), cy: cos === null ? top1 + panelH - 5 : yC(cos), r: fails ? 3.6 : 2,
                                fill: fails || cos !== null ? colour : "#fff", stroke: fails ? "#fff" : colour, "stroke-width": fails ? 0.8 : (cos === null ? 1.4 : 0),
                                "class": cls + (cos === null ? " edge-mark" : ""), "data-op": op});
        dot.appendChild(sv("title", {}, tip));
        svg.appendChild(dot);
        if (!flt) {  // an integer tensor: nothing on the log axis
        } else if (!onScale(rel)) {  // inf/NaN or beyond the clipped axis: a triangle at the top edge of the error panel
          var tx = x(pos[op]), ty = top2 + 5;
          var tri = sv("path", {d: "M" + (tx - 5) + "," + (ty + 4) + " L" + (tx + 5) + "," + (ty + 4) + " L" + tx + "," + (ty - 4) + " Z",
                                fill: colour, "fill-opacity": fails ? 1 : 0.45, "class": cls + " edge-mark rel-edge", "data-op": op});
          tri.appendChild(sv("title", {}, tip));
          svg.appendChild(tri);
        } else if (fails) {
          var rd = sv("circle", {cx: x(pos[op]), cy: yR(rel), r: 3.2, fill: colour, stroke: "#fff", "stroke-width": 0.8, "class": cls + " rel-mark", "data-op": op});
          rd.appendChild(sv("title", {}, tip));
          svg.appendChild(rd);
        }
      });
    });
    var legend = [[A, "#1f6fb4", "A"], [B, "#e8710a", "B"]];
    legend.forEach(function (l, i) {
      var ff = l[0].curve.first_failure;
      svg.appendChild(sv("text", {x: L + 260 + i * 380, y: 12, fill: l[1], "font-weight": "600"},
        (i ? "- - " : "— ") + l[2] + ": run " + l[0].run + " · " + l[0].stage + (ff ? " (first failure " + ff.op_name + ")" : " (no failure)")));
    });
    var key = sv("g", {"class": "legend overlay-legend", transform: "translate(" + L + "," + (top2 - 6) + ")"});
    [["circle", "failing op (filled)"], ["path", "inf/NaN" + (clipped !== null ? " or beyond 1e" + clipped : "") + ": mark at the panel's edge, value in the tooltip"]].forEach(function (item, i) {
      var gx = 190 + i * 170;
      key.appendChild(item[0] === "circle" ? sv("circle", {cx: gx, cy: -4, r: 3.6, fill: "#6b7280"}) : sv("path", {d: "M" + (gx - 5) + ",0 L" + (gx + 5) + ",0 L" + gx + ",-8 Z", fill: "#6b7280"}));
      key.appendChild(sv("text", {x: gx + 8, y: 0, fill: "#4b5563"}, item[1]));
    });
    svg.appendChild(key);
    box.appendChild(svg);
    // ops where the two differ most
    var ia = {}, ib = {};
    A.curve.ops.forEach(function (op, j) { ia[op] = j; }); B.curve.ops.forEach(function (op, j) { ib[op] = j; });
    var both = order.filter(function (op) { return op in ia && op in ib; }).map(function (op) {
      var ca = A.curve.cosine[ia[op]], cb = B.curve.cosine[ib[op]];
      return {op: op, type: A.curve.types[ia[op]], ca: ca, cb: cb, d: (ca === null || cb === null) ? Infinity : Math.abs(ca - cb), ra: A.curve.max_rel_error[ia[op]], rb: B.curve.max_rel_error[ib[op]]};
    });
    both.sort(function (p, q) { return q.d - p.d; });
    both.slice(0, 10).forEach(function (r) {
      var tr = el("tr");
      [pos[r.op], r.op, r.type, fmt(r.ca), fmt(r.cb), r.d === Infinity ? "—" : fmt(r.d), fmt(r.ra), fmt(r.rb)].forEach(function (v, j) {
        tr.appendChild(el("td", {"class": (j === 1 || j === 2) ? "" : "num"}, v));
      });
      body.appendChild(tr);
    });
  }
  ["overlay-a", "overlay-b"].forEach(function (id) { $(id).addEventListener("change", renderOverlay); });
  renderOverlay();
  stickyColumns();
  document.body.setAttribute("data-ready", "1");
})();
