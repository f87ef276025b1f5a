"""What a reader sees on a page in headless Chromium, measured by a script added to a copy of it:
every table cell whose text overflows its box, each table's tallest row, the plot areas and the
marks of the failing ops, the charts' legends, the axis tick labels."""

from __future__ import annotations

import json

from tests.explorer.test_report_page import Dom, headless

# After the page's own script: measure, and write the result into the DOM (read with --dump-dom).
MEASURE = """<script>
(function () {
  function box(e) { var r = e.getBoundingClientRect(); return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width, height: r.height}; }
  function visible(e) { var r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; }
  var out = {overflow: [], tables: {}, plots: {}, marks: [], legends: {}, ticks: {}, viewport: window.innerWidth};
  Array.prototype.forEach.call(document.querySelectorAll("table"), function (t) {
    var tallest = 0, tallestText = "";
    Array.prototype.forEach.call(t.rows, function (row) {
      if (!visible(row)) return;
      var h = row.getBoundingClientRect().height;
      if (h > tallest) { tallest = h; tallestText = row.textContent.replace(/\\s+/g, " ").slice(0, 200); }
      Array.prototype.forEach.call(row.cells, function (c) {
        if (c.scrollWidth > c.clientWidth + 1) out.overflow.push({table: t.id, text: c.textContent.trim().slice(0, 80), scroll: c.scrollWidth, client: c.clientWidth});
      });
    });
    var cols = {};
    if (t.tHead) Array.prototype.forEach.call(t.tHead.rows[0].cells, function (th) { cols[th.textContent.trim()] = box(th); });
    out.tables[t.id] = {tallest: tallest, tallestText: tallestText, columns: cols, box: box(t)};
  });
  Array.prototype.forEach.call(document.querySelectorAll("svg"), function (s) {
    if (!s.id) return;
    out.plots[s.id] = Array.prototype.map.call(s.querySelectorAll("rect"), box).filter(function (r) { return r.width > 200 && r.height > 100; });
    out.legends[s.id] = Array.prototype.map.call(s.querySelectorAll(".legend text"), function (t) { return t.textContent; });
    out.ticks[s.id] = Array.prototype.map.call(s.querySelectorAll(".cos-tick"), function (t) { return t.textContent; });
  });
  Array.prototype.forEach.call(document.querySelectorAll(".fail-mark"), function (m) {
    var svg = m.ownerSVGElement;
    out.marks.push({svg: svg && svg.id, index: m.getAttribute("data-index"), op: m.getAttribute("data-op"),
                    cls: m.getAttribute("class"), box: box(m), tip: (m.querySelector("title") || {}).textContent || ""});
  });
  // a variant-table bar: the strip along the cell's bottom edge must sit below the digits
  out.bars = Array.prototype.map.call(document.querySelectorAll("td.bar"), function (c) {
    var range = document.createRange(); range.selectNodeContents(c);
    var size = getComputedStyle(c).backgroundSize.split(" "), strip = parseFloat(size[1] || "0");
    return {textBottom: range.getBoundingClientRect().bottom, barTop: c.getBoundingClientRect().bottom - strip, strip: strip};
  });
  document.body.setAttribute("data-measured", JSON.stringify(out));
})();
</script>"""


def measure(browser: str, page, tmp_path, width: int, extra: str = "") -> tuple[dict, Dom]:
    html = page.read_text(encoding="utf-8")
    copy = tmp_path / f"check-{width}-{page.parent.name}-{page.name}"
    copy.write_text(html.replace("</body>", extra + MEASURE + "</body>"), encoding="utf-8")
    dom = Dom(headless(browser, copy.as_uri(), "--dump-dom", f"--window-size={width},1400"))
    body = dom.find("body")[0]
    assert "data-measured" in body["attrs"], "the measuring script did not run"
    return json.loads(body["attrs"]["data-measured"]), dom


def inside(mark: dict, plot: dict, slack: float = 0.5) -> bool:
    """The mark's centre within the plot area."""
    cx, cy = (mark["left"] + mark["right"]) / 2, (mark["top"] + mark["bottom"]) / 2
    return plot["left"] - slack <= cx <= plot["right"] + slack and plot["top"] - slack <= cy <= plot["bottom"] + slack
