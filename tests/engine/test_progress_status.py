"""Long stages talk (issue 43): a stage running past ~10 s shows its counts on one status line of a
terminal (dump/compare: tensors, infer: batches, eval: images), nothing when stdout is no terminal;
the summary names where a first failure's advice is."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest

import ascendpipe
from ascendpipe import ticker
from ascendpipe.engine import progress as progress_mod
from ascendpipe.engine.progress import Progress
from tests.explorer.conftest import Workspace


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_the_status_line_shows_stages_past_the_threshold_with_their_counts():
    p = Progress(FakeTTY())
    now = time.monotonic()
    p._running = {"compare@fp16": [now - 42, {"tensors dumped": (120, 400), "target: tensors dumped": (80, 400)}],
                  "eval": [now - 3, {"images": (5, 120)}],  # under 10 s: not shown
                  "train": [now - 15, {}]}
    assert p.status_text(now) == ("  ... compare@fp16 42s: 120/400 tensors dumped (30%), 80/400 target: tensors "
                                  "dumped (20%); train 15s")
    assert p.status_text(now, width=30) == "  ... compare@fp16 42s: 120..."
    p._running = {"eval": [now - 3, {}]}
    assert p.status_text(now) == ""


def test_reports_reach_the_listener_of_their_thread_only():
    seen = []
    ticker.report(1, 2, "nobody listens")  # no listener: nothing happens
    with ticker.listening(lambda *a: seen.append(a)):
        ticker.report(3, 10, "tensors compared")
        import threading

        plain = threading.Thread(target=ticker.report, args=(1, 1, "lost"))
        plain.start(), plain.join()
        carried = threading.Thread(target=ticker.carry(ticker.report, "target:"), args=(2, 4, "tensors dumped"))
        carried.start(), carried.join()
    ticker.report(5, 10, "after")
    assert seen == [(3, 10, "tensors compared"), (2, 4, "target: tensors dumped")]


def test_compare_and_dump_report_their_tensors(tmp_path):
    from ascendpipe.backends.compare_sources import run_compare
    from ascendpipe.compare import thresholds

    ws = Workspace(tmp_path / "ws")
    seen = []
    with ticker.listening(lambda *a: seen.append(a)):
        run_compare(ws.root / "models/l2.onnx", ws.root / "models/l2.onnx", input_path=ws.root / "data/probe.npy",
                    work_dir=tmp_path / "cmp", limits=thresholds.resolve())
    compared = [a for a in seen if a[2] == "tensors compared"]
    assert compared[-1] == (4, 4, "tensors compared") and [a[0] for a in compared] == [1, 2, 3, 4]


def _build_on(stream, ws, monkeypatch, **env):
    for name in ("NO_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {"TERM": "xterm-256color", **env}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(progress_mod, "SHOW_AFTER", 0.0)
    monkeypatch.setattr(progress_mod, "TICK_SECONDS", 0.01)
    slow = "import time; time.sleep(0.5)"
    text = ws.pipeline.read_text().replace('python -c "import os;', f'python -c "{slow}; import os;', 1)
    ws.pipeline.write_text(text)
    ascendpipe.build(str(ws.pipeline), stream=stream)
    return stream.getvalue()


def test_a_terminal_sees_the_status_line_and_a_pipe_does_not(tmp_path, monkeypatch):
    out = _build_on(FakeTTY(), Workspace(tmp_path / "tty"), monkeypatch)
    assert "\r\033[K  ... prep 0s" in out and "\033[32mran      \033[0m prep" in out  # erased, painted
    lines = out.replace("\r\033[K", "\n").splitlines()
    assert any(l.startswith("  \033[32mran      \033[0m prep") for l in lines)
    piped = _build_on(io.StringIO(), Workspace(tmp_path / "pipe"), monkeypatch)
    assert "\033" not in piped and "\r" not in piped and "  ... " not in piped


def test_no_color_gets_no_escape_code_and_a_dumb_terminal_no_redrawn_line(tmp_path, monkeypatch):
    """NO_COLOR (https://no-color.org): no colour, and the status line erased with spaces, not ESC[K;
    TERM=dumb: no escape code and no line redrawn with \\r (issue 48 item 7)."""
    out = _build_on(FakeTTY(), Workspace(tmp_path / "nocolor"), monkeypatch, NO_COLOR="1")
    assert "\033" not in out and "\r  ... prep 0s" in out
    shown = [part for part in out.split("\r") if part.startswith("  ... prep")]
    assert shown and all(f"\r{' ' * len(part)}\r" in out for part in shown)  # each one covered by as many spaces
    assert "  ran       prep" in out.replace("\r", "\n")
    dumb = _build_on(FakeTTY(), Workspace(tmp_path / "dumb"), monkeypatch, TERM="dumb")
    assert "\033" not in dumb and "\r" not in dumb and "  ... " not in dumb
    assert any(line.startswith("  ran       prep") for line in dumb.splitlines())
    # NO_COLOR set but empty is no request (no-color.org: "present and not an empty string")
    assert "\033[32m" in _build_on(FakeTTY(), Workspace(tmp_path / "empty"), monkeypatch, NO_COLOR="")


def test_the_summary_says_where_the_first_failures_advice_is(tmp_path):
    ws = Workspace(tmp_path / "ws")
    out = io.StringIO()
    ascendpipe.build(str(ws.pipeline), stream=out)
    lines = out.getvalue().splitlines()
    at = next(i for i, l in enumerate(lines) if l.startswith("  compare@fp16") and "first failure" in l)
    assert lines[at + 1] == " " * 31 + "advice: build/compare__fp16/report.html (+ keep_dtype.cfg)"
    assert not any("advice:" in l for l in lines if l.startswith("  compare@fp32"))
