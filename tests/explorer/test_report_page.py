"""The explorer page over a workspace with 11 runs, checked in headless Chromium after its JS ran."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

import ascendpipe

ARTEFACTS = Path(os.environ.get("ASCENDPIPE_TEST_ARTEFACTS", Path(__file__).resolve().parents[2] / "tests" / "artefacts"))


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium is not installed (apt-get install -y chromium; .ci/run does it): the page's DOM after its JS cannot be checked")


def headless(browser: str, url: str, *args: str) -> str:
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           "--user-data-dir=" + str(ARTEFACTS / ".chromium-profile"), "--virtual-time-budget=5000", *args, url]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class Dom(HTMLParser):
    """Elements with their attributes and text, enough to query the dumped DOM."""

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[dict] = []
        self._open: list[dict] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        node = {"tag": tag, "attrs": dict(attrs), "text": "", "parents": [e["attrs"].get("id") for e in self._open if e["attrs"].get("id")]}
        self.elements.append(node)
        if tag not in ("br", "img", "input", "meta", "link", "circle", "line", "rect", "polyline", "option"):
            self._open.append(node)

    def handle_endtag(self, tag):
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i]["tag"] == tag:
                del self._open[i:]
                break

    def handle_data(self, data):
        for node in self._open:
            node["text"] += data

    def find(self, tag, inside=None, **attrs):
        out = []
        for e in self.elements:
            if e["tag"] != tag or (inside and inside not in e["parents"]):
                continue
            if all((e["attrs"].get(k.rstrip("_")) or "").split().__contains__(v) if k == "class_" else e["attrs"].get(k) == v
                   for k, v in attrs.items()):
                out.append(e)
        return out


def compared_cosines(ws, which) -> list[int]:
    """How many ops of each compare stage have a finite cosine, from its result.json in the cache."""
    import json

    from ascendpipe.explorer.collect import read_output_file
    from ascendpipe.store.objects import ObjectStore

    objects = ObjectStore(str(ws.root / "cache"))
    out = []
    for run_id, stage in which:
        record = ascendpipe.show(run_id, str(ws.root))
        digest = next(iter(record["stages"][stage]["outputs"].values()))
        rows = json.loads(read_output_file(objects, digest, "result.json"))["rows"]
        out.append(sum(1 for r in rows if r.get("side") == "both" and isinstance(r.get("cosine"), float)))
    return out


@pytest.fixture(scope="module")
def page(many_runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("page") / "runs.html"
    result = ascendpipe.api.report(str(out), workspace=str(many_runs.root))
    return out, result


def test_page_is_self_contained(page, many_runs):
    path, result = page
    html = path.read_text()
    assert result["runs"] == len(many_runs.runs) == 11
    assert result["compare_stages"] == 22  # two compare variants in every run
    assert not re.search(r"<link|<img|@import|src=\"(?!data:)|url\(", html), "the page must fetch nothing"
    assert "https://" not in html


def test_page_in_headless_chromium(page, many_runs):
    browser = chromium()
    path, _ = page
    ids = [r["id"] for r in many_runs.runs]
    first, second = ids[0], ids[1]  # scale 1 -> scale 2
    keep = ids[9]  # the keep_dtype run
    url = f"{path.as_uri()}#diff={first},{second}&overlay={keep}:compare@fp32,{first}:compare@fp16"
    dom = Dom(headless(browser, url, "--dump-dom"))

    assert dom.find("body", **{"data-ready": "1"}), "the page's script did not finish"
    # every run is a row of the runs table
    rows = [int(e["attrs"]["data-run"]) for e in dom.find("tr", inside="runs-table") if "data-run" in e["attrs"]]
    assert sorted(rows) == sorted(ids)
    # the variants table: one row per run and variant, with the precision mode of each
    variants = [(e["attrs"]["data-run"], e["attrs"]["data-variant"]) for e in dom.find("tr", inside="variants-table") if "data-variant" in e["attrs"]]
    assert len(variants) == 22 and {v for _, v in variants} == {"fp32", "fp16"}
    # the diff view marks the changed param (prep's scale 1 -> 2) and the metric it moved
    changed = {(e["attrs"]["data-stage"], e["attrs"]["data-name"]): e["text"] for e in dom.find("tr", inside="diff-table", class_="changed")}
    assert ("prep", "scale") in changed and "1" in changed[("prep", "scale")] and "2" in changed[("prep", "scale")]
    assert ("score", "acc") in changed
    # convert only went from ran to fresh (built both times): nothing of it is marked
    assert not any(stage.startswith("convert") for stage, _ in changed), "only what changed is marked"
    states = {e["attrs"]["data-stage"] for e in dom.find("tr", inside="diff-table") if e["attrs"].get("data-name") == ""}
    assert states == set(), "unchanged-only rows are hidden while 'changed only' is ticked"
    # the overlay: two cosine curves (and two max-rel-error curves), each with a point per compared op
    curves = dom.find("polyline", inside="overlay-svg", class_="curve-cosine")
    assert sorted({c["attrs"]["data-series"] for c in curves}) == ["a", "b"]
    a_points, b_points = ([p for c in curves if c["attrs"]["data-series"] == side for p in c["attrs"]["points"].split()]
                          for side in "ab")
    expected = compared_cosines(many_runs, [(keep, "compare@fp32"), (first, "compare@fp16")])
    assert [len(a_points), len(b_points)] == expected  # a point per op whose cosine is finite
    assert min(expected) >= 2 and a_points != b_points
    # fp16's overflowing sum has no cosine (inf/NaN): its curve has a gap there, two segments, no line through it
    b_segments = [c["attrs"]["points"].split() for c in curves if c["attrs"]["data-series"] == "b"]
    a_segments = [c for c in curves if c["attrs"]["data-series"] == "a"]
    assert len(a_segments) == 1 and len(b_segments) == 2
    gap_x = (float(b_segments[0][-1].split(",")[0]), float(b_segments[1][0].split(",")[0]))
    a_xs = [float(p.split(",")[0]) for p in a_points]
    assert any(gap_x[0] < xx < gap_x[1] for xx in a_xs), "the gap is where an op has no finite cosine"
    assert {c["attrs"]["data-series"] for c in dom.find("polyline", inside="overlay-svg", class_="curve-rel")} == {"a", "b"}
    # both axes are labelled
    titles = {e["text"] for e in dom.find("text", inside="overlay-svg", class_="axis-title")}
    assert {"cosine", "max rel. error"} <= titles and any(t.startswith("op index") for t in titles)
    # the metric chart: one bar per variant of the chosen run, and the compare of A vs B names the overflow
    assert dom.find("line", inside="overlay-svg", class_="first-failure")
    assert len(dom.find("rect", inside="chart-svg", class_="bar")) == 2

    # the filter (here from the URL) narrows both tables and the chart
    dom = Dom(headless(browser, f"{path.as_uri()}#filter=force_fp32", "--dump-dom"))
    shown = [e for e in dom.find("tr", inside="variants-table") if "data-variant" in e["attrs"] and "hidden" not in e["attrs"].get("class", "")]
    assert len(shown) == 11 and {e["attrs"]["data-variant"] for e in shown} == {"fp32"}
    assert [e["attrs"]["data-variant"] for e in dom.find("g", inside="chart-svg", class_="bar-row")] == ["fp32"]

    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTEFACTS / "explorer-runs.png"
    headless(browser, url, f"--screenshot={shot}", "--window-size=1500,2600", "--hide-scrollbars")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    print(f"\nscreenshot of the explorer page: {shot}")


def test_report_command(many_runs, tmp_path):
    import io
    from contextlib import redirect_stdout

    from ascendpipe.cli.main import main as cli

    out = io.StringIO()
    with redirect_stdout(out):
        assert cli(["report", "-C", str(many_runs.root), "-o", str(tmp_path / "r.html"), "--limit", "3"]) == 0
    assert out.getvalue().startswith(f"wrote {tmp_path / 'r.html'}: 3 runs, 6 variant rows, 6 compare stages")
    html = (tmp_path / "r.html").read_text()
    ids = sorted(r["id"] for r in many_runs.runs)[-3:]
    assert all(f'data-run="{i}"' in html for i in ids) and f'data-run="{ids[0] - 1}"' not in html
