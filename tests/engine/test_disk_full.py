"""A real full disk: the workspace on a small tmpfs (needs root and mount; skipped otherwise, and
test_failures.py covers the same paths by fault injection). The build fails with one line naming
the path and the free space, nothing half-recorded; with space freed the next build recovers.
Before: exit 135 (SIGBUS, from infer's memory-mapped outputs on a sparse file) and tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import ascendpipe


def _mount(folder, size: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "fs"
    _mount(mnt, "6m")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _grow(mnt, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mnt)], check=True)


def _build(root):
    return subprocess.run([sys.executable, "-m", "ascendpipe", "build", "pipeline.yaml"], cwd=root, capture_output=True, text=True)


RUNS = """\
stages:
  a:
    kind: run
    cmd: head -c {size} /dev/urandom > a.bin
    outs: [a.bin]
  b:
    kind: run
    cmd: cat a.bin a.bin > b.bin
    deps: [a.bin]
    outs: [b.bin]
"""


def test_disk_full_while_storing_is_one_line_then_recovers(small_fs):
    (small_fs / ".ascendpipe").mkdir()
    (small_fs / "pipeline.yaml").write_text(RUNS.format(size=500_000))
    # files under 1 MiB are copied into the cache (bigger ones share their bytes: the next test)
    _grow(small_fs, "2600k")  # a: 0.5 MB + its object; b: 1 MB written, then its object does not fit
    proc = _build(small_fs)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr
    failed = [line for line in proc.stdout.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and " b " in failed[0]
    assert "no space left on the device" in failed[0] and " free there)" in failed[0]
    run = ascendpipe.show("latest", workspace=str(small_fs))
    assert run["stages"]["a"]["state"] == "ran"
    # the failure reached the record unless the database itself had no room left; either way b
    # has no built state, so status calls it never built
    assert run["stages"].get("b", {"state": "failed"})["state"] == "failed"
    status = ascendpipe.status(str(small_fs / "pipeline.yaml"))
    assert status["stages"]["b"]["reasons"][0] == "never built"
    assert status["stages"]["a"]["state"] == "fresh"
    _grow(small_fs, "32m")
    again = _build(small_fs)
    assert again.returncode == 0, again.stdout + again.stderr
    latest = ascendpipe.show("latest", workspace=str(small_fs))
    assert latest["state"] == "done"
    assert {n: s["state"] for n, s in latest["stages"].items()} == {"a": "fresh", "b": "ran"}
    assert (small_fs / "b.bin").stat().st_size == 1_000_000


def test_big_outputs_share_their_bytes_with_the_cache_and_fit_where_copies_did_not(small_fs):
    """1.5 MB and 3 MB outputs on 6 MB: as copies in cache/ (9 MB) they filled the disk while storing;
    hard-linked (or reflinked) to their objects they cost it once, and restoring them costs nothing."""
    (small_fs / ".ascendpipe").mkdir()
    (small_fs / "pipeline.yaml").write_text(RUNS.format(size=1_500_000))
    proc = _build(small_fs)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    objects = [p for p in (small_fs / "cache" / "objects").rglob("*") if p.is_file()]
    b_object = next(p for p in objects if p.stat().st_size == 3_000_000)
    assert os.path.samefile(b_object, small_fs / "b.bin") or os.stat(b_object).st_nlink == 1  # linked, or a reflink
    os.unlink(small_fs / "b.bin")
    again = _build(small_fs)
    assert again.returncode == 0 and "restored" in again.stdout, again.stdout + again.stderr
    assert (small_fs / "b.bin").read_bytes() == b_object.read_bytes()


def test_disk_full_in_a_memory_mapped_output_is_an_error_not_sigbus(small_fs):
    from tests.modelzoo import linear_model

    (small_fs / ".ascendpipe").mkdir()
    linear_model(small_fs / "m.onnx", features=3, classes=2)
    # 200k rows: outputs y (1.6 MB) and head/score (0.8 MB) beside 2.4 MB of inputs on 6 MB
    np.save(small_fs / "x.npy", np.ones((200_000, 3), np.float32))
    (small_fs / "pipeline.yaml").write_text("stages:\n  infer: {kind: infer, model: m.onnx, inputs: x.npy}\n")
    filler = small_fs / "filler"
    free = os.statvfs(small_fs).f_bavail * os.statvfs(small_fs).f_frsize
    filler.write_bytes(b"\0" * max(0, free - 1_800_000))  # room for the inputs' read and little else
    proc = _build(small_fs)
    assert proc.returncode == 1, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])  # was 135 (SIGBUS)
    assert "no space left on the device" in proc.stdout
    filler.unlink()
    _grow(small_fs, "32m")
    again = _build(small_fs)
    assert again.returncode == 0, again.stdout + again.stderr
    assert np.load(small_fs / "build" / "infer" / "outputs" / "y.npy").shape == (200_000, 2)


def _read_only(folder) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root (chmod does not stop root)")
    proc = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {proc.stderr.strip()}")
    subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)


@pytest.mark.parametrize("folder", ["build", "cache"])
def test_a_read_only_build_or_cache_folder_fails_the_stage_then_recovers(tmp_path, folder):
    from tests.modelzoo import linear_model

    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    linear_model(root / "m.onnx", features=3, classes=2)
    np.save(root / "x.npy", np.ones((4, 3), np.float32))
    (root / "pipeline.yaml").write_text("stages:\n  infer: {kind: infer, model: m.onnx, inputs: x.npy}\n")
    _read_only(root / folder)
    try:
        proc = _build(root)
        assert proc.returncode == 1, (proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stdout + proc.stderr
        line = next(line for line in proc.stdout.splitlines() if "FAILED" in line)
        assert f"{root / folder}" in line and "read-only file system" in line
        run = ascendpipe.show("latest", workspace=str(root))
        assert run["state"] == "failed" and run["stages"]["infer"]["state"] == "failed"
    finally:
        subprocess.run(["umount", str(root / folder)], check=False)
    again = _build(root)
    assert again.returncode == 0, again.stdout + again.stderr
    assert ascendpipe.show("latest", workspace=str(root))["stages"]["infer"]["state"] == "ran"


@pytest.mark.parametrize("command", ["dump", "compare"])
def test_a_full_disk_under_a_standalone_command_is_one_line(small_fs, tmp_path, command):
    """dump and compare outside a build: numpy's short write has no errno, and a write's close has no
    path; both were an 'internal error' with a traceback."""
    from tests.modelzoo import linear_model

    linear_model(tmp_path / "m.onnx", features=64, classes=64)
    np.save(tmp_path / "x.npy", np.ones((40_000, 64), np.float32))  # 10 MB: each tensor alone overfills 6 MB
    if command == "dump":
        argv = ["dump", "--model", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "x.npy"),
                "--max-batch", "40000", "--output", str(small_fs / "d")]
    else:
        argv = ["compare", "--golden", str(tmp_path / "m.onnx"), "--target", str(tmp_path / "m.onnx"),
                "--input", str(tmp_path / "x.npy"), "--output", str(small_fs / "c")]
    proc = subprocess.run([sys.executable, "-m", "ascendpipe", *argv], capture_output=True, text=True)
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("ascendpipe: error: no space left on the device (writing ")
    assert str(small_fs) in line and line.endswith("free there); free some space and run it again")
