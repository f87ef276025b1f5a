"""What a build prints: one line per stage as it finishes, the failure's log tail, a summary."""

from __future__ import annotations

import _thread  # threading.Lock without threading's import (a replayed no-op prints through here)
import os
import sys

_COLOURS = {"ran": "32", "restored": "36", "fresh": "2", "failed": "1;31", "skipped": "33", "running": "34"}


class Progress:
    def __init__(self, stream=None, *, quiet: bool = False, workspace: str = "."):
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self.workspace = workspace
        self.colour = hasattr(self.stream, "isatty") and self.stream.isatty() and os.environ.get("NO_COLOR") is None
        self._lock = _thread.allocate_lock()
        self.verb = "running"  # what a started stage does: `pull` only restores ("restoring")
        # when a list, everything written is kept there too: a no-op's memo replays it (engine/noop_memo.py)
        self.transcript: list[str] | None = None
        # stages running now: name -> [started (monotonic), {unit: (done, total)}]; a status line shows
        # those running past SHOW_AFTER seconds, on a terminal only (``ascendpipe.ticker`` feeds it)
        self._running: dict[str, list] = {}
        self._status_shown = False
        self._ticking = False

    def _paint(self, state: str, text: str) -> str:
        code = _COLOURS.get(state)
        return f"\033[{code}m{text}\033[0m" if self.colour and code else text

    def write(self, text: str) -> None:
        with self._lock:
            if self._status_shown:  # the status line gives way to the line, and comes back below it
                self.stream.write("\r\033[K")
                self._status_shown = False
            self.stream.write(text)
            self.stream.flush()
            if self.transcript is not None:
                self.transcript.append(text)

    def started(self, name: str, reasons: list[str]) -> None:
        if self.quiet:
            return
        why = f"  ({reasons[0]}{' ...' if len(reasons) > 1 else ''})" if reasons else ""
        self.write(f"  {self._paint('running', f'{self.verb:<8}')}  {name}{why}\n")
        if _is_tty(self.stream):  # counts only for someone watching
            import time

            with self._lock:
                self._running[name] = [time.monotonic(), {}]
                start = not self._ticking
                self._ticking = True
            if start:
                _thread.start_new_thread(self._tick_loop, ())

    def tick(self, name: str, done: int, total: int | None, unit: str) -> None:
        """A running stage's count (``ascendpipe.ticker.report`` on its thread)."""
        entry = self._running.get(name)
        if entry is not None:
            entry[1][unit] = (done, total)

    def status_text(self, now: float, width: int = 120) -> str:
        """The stages running for more than SHOW_AFTER seconds, with their counts, in one line."""
        parts = []
        for name, (since, counts) in list(self._running.items()):
            if now - since < SHOW_AFTER:
                continue
            told = ", ".join(f"{done}/{total} {unit}" + (f" ({100 * done // total}%)" if total else "")
                             if total else f"{done} {unit}" for unit, (done, total) in list(counts.items()))
            parts.append(f"{name} {now - since:.0f}s" + (f": {told}" if told else ""))
        text = "  ... " + "; ".join(parts) if parts else ""
        return text if len(text) <= width else text[: width - 3] + "..."

    def _tick_loop(self) -> None:
        import shutil
        import time

        while True:
            time.sleep(TICK_SECONDS)
            with self._lock:
                if not self._running:
                    self._ticking = False
                    if self._status_shown:
                        self.stream.write("\r\033[K")
                        self.stream.flush()
                        self._status_shown = False
                    return
                text = self.status_text(time.monotonic(), shutil.get_terminal_size((120, 24)).columns - 1)
                if text or self._status_shown:
                    try:
                        self.stream.write("\r\033[K" + text)
                        self.stream.flush()
                    except (OSError, ValueError):  # the console went away: stop showing
                        self._running.clear()
                        continue
                    self._status_shown = bool(text)

    def finished(self, outcome) -> None:
        self._running.pop(outcome.name, None)
        if self.quiet and outcome.state not in ("failed",):
            return
        label = {"ran": "ran", "restored": "restored", "fresh": "fresh", "failed": "FAILED", "skipped": "skipped"}[outcome.state]
        elapsed = f"{outcome.duration:7.2f}s" if outcome.state in ("ran", "restored", "failed") else " " * 8
        extra = ""
        if outcome.state == "restored" and not outcome.note:
            extra = "  from the run-cache"
        elif outcome.state in ("failed", "skipped") and outcome.error:
            extra = f"  {outcome.error}"
        if outcome.note:
            extra += f"  [{outcome.note}]"
        self.write(f"  {self._paint(outcome.state, f'{label:<9}')} {outcome.name:<28} {elapsed}{extra}\n")
        if outcome.state == "failed" and outcome.log:
            self.write(self.log_tail(outcome.log))

    def log_tail(self, log: str, lines: int = 15) -> str:
        try:
            with open(os.path.join(self.workspace, log), errors="replace") as f:
                tail = f.readlines()[-lines:]
        except OSError:
            return ""
        if not any(line.strip() and not line.startswith("# ascendpipe stage ") for line in tail):
            return ""  # only the log's header: nothing there explains the failure (the line above does)
        body = "".join(f"      | {_clip(line.rstrip())}\n" for line in tail)
        return f"    last lines of {log}:\n{body}"

    def summary(self, outcomes: dict, elapsed: float, run_id: int) -> None:
        counts: dict[str, int] = {}
        for o in outcomes.values():
            counts[o.state] = counts.get(o.state, 0) + 1
        self.write(summary_line(counts, elapsed, run_id))


SHOW_AFTER = 10.0  # seconds a stage runs before its counts show (a short stage stays one line)
TICK_SECONDS = 1.0


def _is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def summary_line(counts: dict[str, int], elapsed: float, run_id: int) -> str:
    """``30 stages: 30 fresh in 0.05s (run 12)``: a build's last line before its metrics."""
    order = ["ran", "restored", "fresh", "failed", "skipped"]
    parts = [f"{counts[s]} {s}" for s in order if counts.get(s)]
    total = sum(counts.values())
    return f"{total} stage{'s' if total != 1 else ''}: {', '.join(parts) or 'nothing to do'} in {elapsed:.2f}s (run {run_id})\n"


def _clip(line: str, width: int = 300) -> str:
    # a 200 kB command line is one log line: show its start, not a screenful
    return line if len(line) <= width else f"{line[:width]} ... ({len(line) - width} more characters)"


# Kinds whose metrics are the story of a build (accuracy and speed), printed after the summary.
HEADLINE_KINDS = ("eval", "compare", "profile", "tune", "export")
_SKIP = ("delta_rank5", "delta_rank10")


def first_failure_text(info: dict | None) -> str:
    """``/ReduceSum (ReduceSum, TbeReduceElemwiseFusionPass, overflow)`` from a compare stage's info."""
    ff = (info or {}).get("first_failure")
    if not isinstance(ff, dict) or not ff.get("op_name"):
        return ""
    detail = ", ".join(str(v) for v in (ff.get("op_type"), ff.get("pass_name"), ff.get("kind")) if v)
    return f"{ff['op_name']} ({detail})" if detail else str(ff["op_name"])


ADVICE_FILES = ("report.html", "keep_dtype.cfg", "fusion_switch.cfg", "aipp.cfg")


def advice_files(pipeline, stage) -> str:
    """``build/compare__fp16/report.html (+ keep_dtype.cfg, fusion_switch.cfg)``: a compare's report and
    the remedy files its first failure's advice wrote, where they are."""
    if stage.kind != "compare" or not stage.outs:
        return ""
    folder = stage.outs[0].rstrip("/")
    names = [n for n in ADVICE_FILES if os.path.isfile(os.path.join(str(pipeline.workspace), folder, n))]
    if not names:
        return ""
    head, rest = (names[0], names[1:]) if names[0] == "report.html" else (None, names)
    text = f"{folder}/{head}" if head else f"{folder}/"
    return text + (f" (+ {', '.join(rest)})" if head and rest else ", ".join(rest) if not head else "")


TIMED_KINDS = ("profile", "tune")  # kinds whose headline metrics are latencies
HOST_TIME = "host_cpu_emulation"  # summary.json's time_measured_on on the onnxruntime backend
HOST_TIME_WORDS = ("times: the host CPU's, measured on the onnxruntime emulation (time_measured_on: "
                   "host_cpu_emulation), not an NPU's")


def times_measured_on(pipeline, stage) -> str | None:
    """Where a profile or tune stage's times were measured: its summary.json's ``time_measured_on`` (profile),
    else the backend's (the onnxruntime emulation times the host CPU; the ascend backend the NPU); None
    for a kind that measures no time."""
    if stage.kind not in TIMED_KINDS:
        return None
    if stage.outs:
        import json

        try:
            with open(os.path.join(str(pipeline.workspace), stage.outs[0], "summary.json"), encoding="utf-8") as f:
                found = json.load(f).get("time_measured_on")
        except (OSError, ValueError, AttributeError):
            found = None
        if isinstance(found, str) and found:
            return found
    return HOST_TIME if pipeline.backend == "onnxruntime" else "npu"


def headline(pipeline, outcomes: dict, order: list[str], limit: int = 8, infos: dict | None = None) -> str:
    """``infos``: stage -> its recorded info (a compare's first failure is named by op, not by index).
    The eval stages come first, each leading with its task's key metric (``contract.KEY_METRIC``)."""
    from ascendpipe.contract import key_metric

    lines, keyed, keys = [], [], []
    for name in order:
        o = outcomes.get(name)
        stage = pipeline.stages[name]
        if o is None or stage.kind not in HEADLINE_KINDS or not o.metrics:
            continue
        first = first_failure_text((infos or {}).get(name))
        # by name: a stage's metrics read back from the database (a no-op) come sorted, so the line
        # is the same whether the stage ran now or before
        items = [(k, v) for k, v in sorted(o.metrics.items()) if isinstance(v, (int, float)) and k not in _SKIP
                 and not (first and k == "first_failure_index")]
        key = key_metric(stage.kind, stage.params)
        if key in o.metrics:
            lead = [key, f"delta_{key}"]
            items = sorted(items, key=lambda kv: lead.index(kv[0]) if kv[0] in lead else len(lead))
            keys.append(key)
        text = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in items[:limit])
        host_times = times_measured_on(pipeline, stage) == HOST_TIME  # latencies of the emulation are no NPU's
        if host_times:
            text = f"(host CPU) {text}"
        if first:
            text = f"first failure {first}  {text}"
        elif (stage.kind == "compare" and o.metrics.get("contained_ops")
              and str(((infos or {}).get(name) or {}).get("verdict") or "").startswith("every output passes")):
            # ops beyond thresholds whose error no output shows: said before the count, never as a failure
            text = f"outputs pass ({o.metrics['contained_ops']} contained)  {text}"
        (keyed if key in o.metrics else lines).append(f"  {name:<28} {text}")
        where = advice_files(pipeline, stage) if first else ""
        if where:  # where the first failure's advice is: its report and the remedy files to paste
            (keyed if key in o.metrics else lines).append(f"  {'':<28} advice: {where}")
        if host_times:
            (keyed if key in o.metrics else lines).append(f"  {'':<28} {HOST_TIME_WORDS}")
    head = f"metrics (key: {', '.join(dict.fromkeys(keys))}):\n" if keys else "metrics:\n"
    return (head + "\n".join(keyed + lines) + "\n") if keyed or lines else ""
