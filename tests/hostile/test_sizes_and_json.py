"""Sizes a file claims, JSON nested past reading, a full disk (issue 48 item 5).

Each is one located line (exit 2, or a stage FAILED with its pipeline line), never a traceback, checked
before anything is allocated or written: a 10^11 input dim that random inputs would be drawn from, an
.npy header claiming 10^12 elements, an .npy that holds what it claims but more than the machine has, a
labels JSON nesting bomb, a disk that fills while the source stage copies a model's weights."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import numpy.lib.format as fmt
import pytest

from ascendpipe import hostmemory
from ascendpipe.cli.main import main
from ascendpipe.errors import UserError
from ascendpipe.userfile import MAX_JSON_DEPTH, json_depth, load_json, parse_json
from tests.hostile.test_corpus import snapshot
from tests.modelzoo import conv_bn_relu_model

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
            **extra}


def _relu_model(path: Path, dims: list[int]) -> Path:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _claiming(path: Path, shape: tuple, descr: str = "<f4", data: int = 64) -> Path:
    """An .npy whose header claims ``shape`` over ``data`` bytes."""
    with open(path, "wb") as fh:
        fmt.write_array_header_1_0(fh, {"descr": descr, "fortran_order": False, "shape": shape})
        fh.write(b"\0" * data)
    return path


@pytest.fixture
def ws(tmp_path, monkeypatch):
    root = tmp_path / "ws"
    (root / ".ascendpipe").mkdir(parents=True)
    monkeypatch.chdir(root)
    return root


def _build(capsys, *argv) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(["build", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, out + err
    return code, out.splitlines() + err.splitlines()


# ---- the machine's memory ------------------------------------------------------------------------

def test_available_memory_is_what_meminfo_and_the_cgroup_allow(tmp_path, monkeypatch):
    found = hostmemory.available_bytes()
    if os.path.exists("/proc/meminfo"):
        total = next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal:"))
        assert 0 < found <= total
    limit, usage = tmp_path / "memory.max", tmp_path / "memory.current"
    limit.write_text("1073741824\n")
    usage.write_text("268435456\n")
    monkeypatch.setattr(hostmemory, "_CGROUP_FILES", ((str(limit), str(usage)),))
    monkeypatch.setattr(hostmemory, "_meminfo_available", lambda: 8 << 30)
    assert hostmemory.available_bytes() == (1 << 30) - (256 << 20)  # the container's room, below the host's
    limit.write_text("max\n")  # cgroup v2's "no limit"
    assert hostmemory.available_bytes() == 8 << 30


def test_check_fits_says_what_needs_how_much_and_what_the_machine_has():
    hostmemory.check_fits(1 << 20, "x", available=2 << 20)
    with pytest.raises(UserError) as err:
        hostmemory.check_fits(3 << 40, "reading labels.npy", available=21 << 30)
    assert str(err.value) == ("reading labels.npy needs 3.0 TiB, more than the 21.0 GiB of memory this machine has "
                              "available")


# ---- sizes read from files -----------------------------------------------------------------------

def test_a_compare_stage_drawing_random_inputs_from_a_huge_dim_is_its_located_line(ws, capsys):
    _relu_model(ws / "m.onnx", [10 ** 11])
    (ws / "p.yaml").write_text("stages:\n  c:\n    kind: compare\n    golden: m.onnx\n    target: m.onnx\n")
    code, lines = _build(capsys, "p.yaml")
    failed = [line for line in lines if "FAILED" in line]
    assert code == 1 and len(failed) == 1, lines
    # 10^11 float32 kept plus the float64 draw: 1.2e12 bytes
    assert ("p.yaml:2: stage 'c': making random inputs for this model (input 'x' is [100000000000] float32) needs "
            "1.1 TiB, more than the ") in failed[0], failed[0]
    assert failed[0].endswith("of memory this machine has available (give the model's real inputs (--input "
                              "FILE.npy|FILE.npz|FOLDER, or a stage's inputs:), or fix its input dims)")
    assert "Traceback" not in (ws / "build" / "c.log").read_text()


def test_random_inputs_under_the_cap_but_past_the_machine_are_refused_at_the_flag(ws, capsys, monkeypatch):
    _relu_model(ws / "m.onnx", [1, 3, 512, 512])  # 3 MiB of float32, drawn as 6 MiB of float64 first
    monkeypatch.setattr(hostmemory, "available_bytes", lambda: 4 << 20)
    before = snapshot(ws)
    for argv in (["infer", "--model", "m.onnx", "--output", "o"],
                 ["compare", "--golden", "m.onnx", "--target", "m.onnx"]):
        capsys.readouterr()
        assert main(argv) == 2
        flag = argv[1]
        assert capsys.readouterr().err == (
            f"ascendpipe: error: {flag} m.onnx: making random inputs for this model (input 'x' is [1, 3, 512, 512] "
            "float32) needs 9.0 MiB, more than the 4.0 MiB of memory this machine has available (give the model's "
            "real inputs with --input FILE.npy|FILE.npz|FOLDER)\n")
    assert snapshot(ws) == before


def test_random_inputs_are_drawn_as_before_when_they_fit():
    from ascendpipe.inputs import InputSpec, random_inputs

    batch = random_inputs([InputSpec("x", (2, 3), "float32"), InputSpec("n", (2,), "int64")], seed=5)
    rng = np.random.default_rng(5)  # the same draws, in the same order, as before the size check
    np.testing.assert_array_equal(batch["x"], rng.standard_normal([2, 3]).astype(np.float32))
    np.testing.assert_array_equal(batch["n"], rng.integers(0, 10, [2]).astype(np.int64))


def test_an_npy_that_holds_what_it_claims_but_not_what_the_machine_has_is_refused(ws, capsys, monkeypatch):
    conv_bn_relu_model(ws / "m.onnx")
    np.save(ws / "x.npy", np.zeros((64, 3, 16, 16), np.float32))  # 192 KiB, all there
    monkeypatch.setattr(hostmemory, "available_bytes", lambda: 100 << 10)
    before = snapshot(ws)
    code = main(["infer", "--model", "m.onnx", "--input", "x.npy", "--output", "o"])
    err = capsys.readouterr().err
    assert code == 2 and err == ("ascendpipe: error: x.npy: reading input file needs 192.0 KiB, more than the "
                                 "100.0 KiB of memory this machine has available (give a smaller file, or run where "
                                 "more memory is free)\n")
    assert snapshot(ws) == before


def test_labels_whose_header_claims_terabytes_fail_the_eval_stage_at_their_line(ws, capsys):
    (ws / "outs").mkdir()
    np.save(ws / "outs" / "logits.npy", np.zeros((4, 10), np.float32))
    _claiming(ws / "labels.npy", (10 ** 12,), "<i8")
    (ws / "p.yaml").write_text("stages:\n  ev:\n    kind: eval\n    outputs: outs\n    labels: labels.npy\n"
                               "    params: {task: classification}\n")
    code, lines = _build(capsys, "p.yaml")
    failed = [line for line in lines if "FAILED" in line]
    assert code == 1 and failed[0].endswith(
        "p.yaml:5:13: stage 'ev': 'labels.npy': labels: labels.npy is damaged or truncated: its header says int64 "
        "[1000000000000] (7.3 TiB), but it holds 64 B of data (write the array again (np.save))"), failed


# ---- JSON nested past reading ----------------------------------------------------------------------

@pytest.mark.parametrize("text,depth", [("3", 0), ("[]", 1), ('{"a": [[1], {"b": []}]}', 4),
                                        ("[" * 64 + "]" * 64, 64), ("[" * 65 + "]" * 65, 65)])
def test_json_depth_counts_levels_without_recursion(text, depth):
    assert json_depth(json.loads(text)) == depth


def test_json_nested_past_the_limit_or_past_python_is_one_line(tmp_path):
    assert parse_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "f.json") is not None  # at the limit: read
    line = ("f.json: JSON nested deeper than it can be read (arrays or objects inside each other more than 64 levels "
            "deep): not a labels file")
    for depth in (MAX_JSON_DEPTH + 1, 900, 100_000):  # 900: parses, and would meet the recursion limit next
        with pytest.raises(UserError) as err:
            parse_json("[" * depth + "]" * depth, "f.json", "labels file")
        assert str(err.value) == line
    (tmp_path / "big.json").write_text("[" + "1," * 5000 + "1]")
    assert len(load_json(tmp_path / "big.json")) == 5001


def test_a_labels_json_nesting_bomb_fails_the_eval_stage_at_its_line(ws, capsys):
    (ws / "outs").mkdir()
    np.save(ws / "outs" / "logits.npy", np.zeros((4, 10), np.float32))
    (ws / "bomb.json").write_text('{"labels": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (ws / "p.yaml").write_text("stages:\n  ev:\n    kind: eval\n    outputs: outs\n    labels: bomb.json\n"
                               "    params: {task: classification}\n")
    code, lines = _build(capsys, "p.yaml")
    failed = [line for line in lines if "FAILED" in line]
    assert code == 1 and failed[0].endswith(
        f"p.yaml:5:13: stage 'ev': 'bomb.json': labels: {ws / 'bomb.json'}: JSON nested deeper than it can be read "
        "(arrays or objects inside each other more than 64 levels deep): not a labels file"), failed
    assert "RecursionError" not in (ws / "build" / "ev.log").read_text()


def test_deep_json_in_the_remote_configuration_and_a_tune_bank_is_one_line(ws, capsys):
    (ws / ".ascendpipe" / "config.json").write_text('{"remote": ' + "[" * 5000 + "]" * 5000 + "}")
    (ws / "p.yaml").write_text("stages:\n  a:\n    kind: run\n    cmd: echo hi > o\n    outs: [o]\n")
    assert main(["push", "p.yaml"]) == 2
    err = capsys.readouterr().err
    assert err == (f"ascendpipe: error: {ws / '.ascendpipe' / 'config.json'} is not JSON (JSON nested deeper than it "
                   "can be read (arrays or objects inside each other more than 64 levels deep): not a remote "
                   "configuration); fix it or remove it\n")
    conv_bn_relu_model(ws / "m.onnx")
    (ws / "bank.json").write_text("[" * 3000 + "]" * 3000)
    assert main(["convert", "--model", "m.onnx", "--output", "o", "--tune-bank", "bank.json"]) == 2
    assert capsys.readouterr().err == ("ascendpipe: error: bank.json: JSON nested deeper than it can be read (arrays "
                                       "or objects inside each other more than 64 levels deep): not a tune bank\n")
    assert not (ws / "o").exists()


# ---- a full disk --------------------------------------------------------------------------------

def _external_model(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 512])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location=path.name + ".data", size_threshold=0)


def _can_mount_tmpfs(folder: Path) -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {folder}"],
                           capture_output=True)
    return probe.returncode == 0


def test_a_disk_that_fills_while_the_source_stage_copies_weights_is_one_line_naming_the_file(tmp_path):
    """A real full file system (a 1.2 MB tmpfs in a user namespace) under a source stage copying 1 MiB of
    external weights: the stage's line and its log name the file being written, no traceback anywhere."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if not _can_mount_tmpfs(mount):
        pytest.skip("no user namespace to mount a tmpfs in (unshare -rm); test_enospc_names_the_file_written covers it")
    maker = tmp_path / "make.py"
    maker.write_text(f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
                     "from pathlib import Path\nfrom tests.hostile.test_sizes_and_json import _external_model\n"
                     "_external_model(Path('m.onnx'))\n")
    script = (f"set -e; mount -t tmpfs -o size=1200k tmpfs {mount}; cd {mount}; mkdir .ascendpipe; "
              f"{sys.executable} {maker}; "
              "printf 'stages:\\n  src:\\n    kind: source\\n    model: m.onnx\\n' > p.yaml; "
              f"{sys.executable} -m ascendpipe build p.yaml > out.txt 2>&1 || true; cat out.txt; "
              "echo ---; cat build/src.log")
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, env=_env(),
                          timeout=300)
    out, log = proc.stdout.split("\n---\n")
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    failed = [line for line in out.splitlines() if "FAILED" in line]
    # the source stage checks the free space before it copies (the disk is full already), else the copy's
    # ENOSPC is said: either way one line naming the stage's folder
    assert len(failed) == 1 and "no space left on the device" in failed[0] and f"{mount}/build/src" in failed[0], out
    assert failed[0].endswith("; free some space and build again")
    assert log.splitlines()[-1].startswith("error: ") and f"{mount}/build/src" in log.splitlines()[-1]


def test_enospc_names_the_file_written(tmp_path):
    """The same without a tmpfs: os.write's ENOSPC (no file name) inside an atomic write is named by the
    file, a stage's temp output folder by the stage's folder."""
    from ascendpipe.fsutil import atomic_path
    from ascendpipe.store.failures import explain

    target = tmp_path / "build" / ".tmp-src-k2j9x1" / "m.onnx.data"
    with pytest.raises(OSError) as caught:
        with atomic_path(target):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert caught.value.filename == str(target) and not list(target.parent.iterdir())
    assert explain(caught.value).startswith(f"no space left on the device (writing {tmp_path}/build/src/m.onnx.data; ")
