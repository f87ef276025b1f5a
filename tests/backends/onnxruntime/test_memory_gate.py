"""Two dumps made at once (a compare's target and golden): the shared memory gate lets runs through
in turn within its capacity, the dumps are the bytes made one after the other, and a failure on
either side stops the other and is raised as it would be one after the other."""

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ascendpipe.backends import compare_sources
from ascendpipe.backends.compare_sources import run_compare
from ascendpipe.backends.onnxruntime.dump import dump_model
from ascendpipe.backends.onnxruntime.memory_gate import GateClosed, MemoryGate
from ascendpipe.compare import thresholds as thr
from ascendpipe.errors import UserError
from tests import modelzoo


def _holding(gate: MemoryGate, nbytes: int, entered: threading.Event, leave: threading.Event, seen: list):
    def run():
        try:
            with gate.hold(nbytes):
                seen.append((nbytes, gate.crowded()))
                entered.set()
                leave.wait(10)
        except GateClosed:
            seen.append((nbytes, "closed"))
            entered.set()
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _waits(event: threading.Event) -> bool:
    """Whether ``event`` is still unset after a moment (its hold is waiting)."""
    return not event.wait(0.2)


def test_runs_that_fit_together_hold_at_once_and_one_past_the_capacity_waits():
    gate = MemoryGate(100)
    seen: list = []
    a_in, b_in, c_in = threading.Event(), threading.Event(), threading.Event()
    a_out, b_out, c_out = threading.Event(), threading.Event(), threading.Event()
    a = _holding(gate, 60, a_in, a_out, seen)
    assert a_in.wait(5)
    b = _holding(gate, 40, b_in, b_out, seen)  # 60 + 40 = 100: fits
    assert b_in.wait(5)
    c = _holding(gate, 10, c_in, c_out, seen)  # 110 > 100: waits for a release
    assert _waits(c_in)
    b_out.set()
    b.join(5)
    assert c_in.wait(5)  # 60 + 10 fits once b is gone
    a_out.set()
    c_out.set()
    a.join(5)
    c.join(5)
    assert seen == [(60, False), (40, True), (10, True)]  # each saw the others holding beside it
    assert not gate.crowded()


def test_a_run_larger_than_the_capacity_goes_alone_and_is_not_passed_over():
    gate = MemoryGate(100)
    seen: list = []
    small_in, big_in, later_in = threading.Event(), threading.Event(), threading.Event()
    small_out, big_out, later_out = threading.Event(), threading.Event(), threading.Event()
    small = _holding(gate, 30, small_in, small_out, seen)
    assert small_in.wait(5)
    big = _holding(gate, 500, big_in, big_out, seen)  # over the capacity: waits until nothing is held
    assert _waits(big_in)
    later = _holding(gate, 30, later_in, later_out, seen)  # would fit beside small, but big asked first
    assert _waits(later_in)
    small_out.set()
    small.join(5)
    assert big_in.wait(5) and _waits(later_in)  # big runs alone
    big_out.set()
    big.join(5)
    assert later_in.wait(5)
    later_out.set()
    later.join(5)
    assert seen == [(30, False), (500, False), (30, False)]


def test_closing_the_gate_stops_a_waiting_run_and_every_later_one():
    gate = MemoryGate(10)
    seen: list = []
    first_in, waiting_in = threading.Event(), threading.Event()
    first_out, waiting_out = threading.Event(), threading.Event()
    first = _holding(gate, 10, first_in, first_out, seen)
    assert first_in.wait(5)
    waiting = _holding(gate, 10, waiting_in, waiting_out, seen)
    assert _waits(waiting_in)
    gate.close()
    assert waiting_in.wait(5)
    waiting.join(5)
    first_out.set()
    first.join(5)
    with pytest.raises(GateClosed):
        with gate.hold(1):
            pass
    assert seen == [(10, False), (10, "closed")]


class CountingGate(MemoryGate):
    def __init__(self, capacity):
        super().__init__(capacity)
        self.crowded_runs = 0

    def crowded(self):
        crowded = super().crowded()
        self.crowded_runs += crowded
        return crowded


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import ConvertSettings

    folder = tmp_path_factory.mktemp("gate")
    model = modelzoo.text_detector(folder / "det.onnx", size=64, width=8, blocks=2)
    convert_model(model, folder / "conv", ConvertSettings(precision_mode="force_fp16"))
    return model, folder / "conv" / "model.onnx", {"image": modelzoo.text_detector_inputs(size=64)["image"]}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_two_dumps_made_at_once_are_the_bytes_made_one_after_the_other(detector, tmp_path):
    golden, target, feeds = detector
    budget = 64 << 10  # segments of a few tensors each: many runs to interleave
    dump_model(target, feeds, tmp_path / "seq_target", fusions=True, memory_budget_bytes=budget)
    dump_model(golden, feeds, tmp_path / "seq_golden", fusions=False, memory_budget_bytes=budget)
    gate = CountingGate(4 * budget)
    other = threading.Thread(target=dump_model, args=(target, feeds, tmp_path / "at_once_target"),
                             kwargs={"fusions": True, "memory_budget_bytes": budget, "gate": gate})
    other.start()
    dump_model(golden, feeds, tmp_path / "at_once_golden", fusions=False, memory_budget_bytes=budget, gate=gate)
    other.join(60)
    assert gate.crowded_runs > 0  # some runs did share the cores (each then on one onnxruntime thread)
    for side in ("target", "golden"):
        made_alone, made_at_once = _files(tmp_path / f"seq_{side}"), _files(tmp_path / f"at_once_{side}")
        assert len(made_alone) > 20 and made_alone == made_at_once, side


def _compare(golden, target, x, work, monkeypatch, cores):
    monkeypatch.setattr(compare_sources, "_cores", lambda: cores)
    return run_compare(golden, target.parent, input_path=x, work_dir=work, limits=thr.resolve())


def test_compare_dumps_both_sides_at_once_with_the_same_result(detector, tmp_path, monkeypatch):
    golden, target, feeds = detector
    np.save(tmp_path / "x.npy", feeds["image"])
    calls = []
    real_dump = compare_sources.dump

    def dump(model, feeds, out_dir, *, fusions, gate=None):
        calls.append((fusions, gate is not None, threading.current_thread() is threading.main_thread()))
        return real_dump(model, feeds, out_dir, fusions=fusions, gate=gate)

    monkeypatch.setattr(compare_sources, "dump", dump)
    at_once, _ = _compare(golden, target, tmp_path / "x.npy", tmp_path / "two", monkeypatch, cores=2)
    assert sorted(calls) == [(False, True, True), (True, True, False)]  # golden here, target on a worker
    calls.clear()
    one_core, _ = _compare(golden, target, tmp_path / "x.npy", tmp_path / "one", monkeypatch, cores=1)
    assert calls == [(True, False, True), (False, False, True)]  # target, then golden, no gate
    assert at_once["rows"] == one_core["rows"] and at_once["summary"] == one_core["summary"]
    assert at_once["rows"] and at_once["summary"]["compared_tensors"] > 10
    for side in ("target_dump", "golden_dump"):
        assert _files(tmp_path / "two" / side) == _files(tmp_path / "one" / side)


@pytest.mark.parametrize("failing", ["target", "golden"])
def test_a_failing_dump_stops_the_other_and_its_error_is_raised(detector, tmp_path, monkeypatch, failing):
    golden, target, feeds = detector
    np.save(tmp_path / "x.npy", feeds["image"])
    started, outcome = threading.Event(), []

    def dump(model, feeds, out_dir, *, fusions, gate=None):
        side = "target" if fusions else "golden"
        if side == failing:
            assert started.wait(10)  # the other side is under way when this one fails
            raise UserError(f"the {side} cannot be dumped")
        started.set()
        deadline = time.monotonic() + 10
        while not gate.closed and time.monotonic() < deadline:  # the failure closes the gate ...
            time.sleep(0.01)
        try:  # ... so the other side's next run does not start
            result = dump_model(model, feeds, out_dir, fusions=fusions, gate=gate)
        except GateClosed:
            outcome.append("stopped")
            raise
        outcome.append("finished")
        return result

    monkeypatch.setattr(compare_sources, "dump", dump)
    with pytest.raises(UserError, match=f"the {failing} cannot be dumped"):
        _compare(golden, target, tmp_path / "x.npy", tmp_path / "w", monkeypatch, cores=2)
    assert outcome == ["stopped"]
    other = "golden_dump" if failing == "target" else "target_dump"
    assert not (tmp_path / "w" / other / "index.json").exists()
