"""The no-op memo (engine/noop_memo.py, engine/noop_replay.py): `build PIPELINE` run again with nothing
changed replays the deciding build's answer; every input the decision read makes it decide again."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

from ascendpipe.cli.main import main
from ascendpipe.engine import noop_memo
from ascendpipe.engine.noop_replay import replay
from tests.engine.conftest import CHAIN

ARGV = ["build", "pipeline.yaml"]


@pytest.fixture
def settled(monkeypatch):
    """Stats are trusted at once (the racy window is two seconds: these tests change files within
    one, and change each file's size or time, so no change hides behind a stat)."""
    import ascendpipe.store.hashing as hashing

    monkeypatch.setattr(hashing, "RACY_WINDOW_NS", 0)


def _build(capsys, *extra) -> str:
    assert main([*ARGV, *extra]) == 0
    return capsys.readouterr().out


def _memo_file(ws) -> Path:
    return Path(noop_memo.memo_path(str(ws.root / ".ascendpipe"), ARGV, str(ws.root)))


def _remembered(ws, capsys) -> str:
    """Build until nothing runs and the memo is written; returns the deciding no-op's output."""
    _build(capsys)
    out = _build(capsys)
    assert _memo_file(ws).is_file()
    assert "fresh" in out and "ran" not in out.split("stages:")[-1]
    return out


def _replays(capsys) -> bool:
    code = replay(list(ARGV))
    capsys.readouterr()
    return code == 0


def _states(capsys, *extra) -> dict[str, str]:
    out = _build(capsys, *extra)
    return {line.split()[1]: line.split()[0] for line in out.splitlines()
            if line.startswith("  ") and line.split()[0] in ("ran", "restored", "fresh")}


def _runs(ws) -> list[tuple]:
    with sqlite3.connect(ws.root / ".ascendpipe/ascendpipe.db") as c:
        return c.execute("SELECT id, state FROM runs ORDER BY id").fetchall()


def _stage_rows(ws, run_id) -> list[tuple]:
    with sqlite3.connect(ws.root / ".ascendpipe/ascendpipe.db") as c:
        return c.execute("SELECT seq, name, kind, state, key, params, deps, outs, tools, metrics, remedy, info, reasons, "
                         "duration, log_path, error FROM stage_runs WHERE run_id=? ORDER BY seq", (run_id,)).fetchall()


@pytest.fixture
def chain(ws, settled):
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    return ws


def test_a_remembered_noop_replays_the_same_lines_and_the_same_record(chain, capsys):
    deciding = _remembered(chain, capsys)
    decided_run = _runs(chain)[-1][0]
    assert replay(list(ARGV)) == 0
    replayed = capsys.readouterr().out
    assert chain.ran() == ["prepare", "train", "report"]  # the first build only

    def without_summary(text):
        return [line for line in text.splitlines() if " stages: " not in line]

    assert without_summary(replayed) == without_summary(deciding)
    summary = [line for line in replayed.splitlines() if " stages: " in line]
    runs = _runs(chain)
    assert runs[-1] == (decided_run + 1, "done")
    assert summary[0].startswith("3 stages: 3 fresh in ") and summary[0].endswith(f"(run {decided_run + 1})")
    assert _stage_rows(chain, decided_run + 1) == _stage_rows(chain, decided_run)


def test_what_is_not_build_pipeline_is_never_replayed():
    assert noop_memo.replayable(["build", "p.yaml"]) == ("p.yaml", False)
    assert noop_memo.replayable(["build", "-q", "p.yaml"]) == ("p.yaml", True)
    for argv in (["build"], ["status", "p.yaml"], ["build", "p.yaml", "train"], ["build", "p.yaml", "--json"],
                 ["build", "p.yaml", "-j", "1"], ["build", "p.yaml", "--set", "params.x=1"], ["build", "-f", "p.yaml"],
                 ["build", "p.yaml", "--force"], ["build", "p.yaml", "-n"]):
        assert noop_memo.replayable(argv) is None, argv


def test_a_flag_decides_and_does_not_overwrite_the_memo(chain, capsys):
    _remembered(chain, capsys)
    before = _memo_file(chain).read_bytes()
    assert set(_states(capsys, "-j", "1").values()) == {"fresh"}
    assert _memo_file(chain).read_bytes() == before
    assert _replays(capsys)


@pytest.mark.parametrize("change, expected", [
    ("edit a dep", {"prepare": "ran", "train": "ran", "report": "ran"}),
    ("delete an out", {"prepare": "fresh", "train": "fresh", "report": "restored"}),
    ("edit an out", {"prepare": "fresh", "train": "restored", "report": "fresh"}),
    ("edit the pipeline", {"prepare": "fresh", "train": "ran", "report": "ran"}),
    ("an overrides file", {"prepare": "fresh", "train": "ran", "report": "ran"}),
    ("another build's state", {"prepare": "fresh", "train": "restored", "report": "restored"}),
])
def test_every_input_of_the_decision_makes_it_decide_again(chain, capsys, change, expected):
    _remembered(chain, capsys)
    root = chain.root
    if change == "edit a dep":
        (root / "input.txt").write_text("hello, again")
    elif change == "delete an out":
        (root / "data/report.txt").unlink()
    elif change == "edit an out":
        (root / "data/model.txt").write_text("tampered with")
    elif change == "edit the pipeline":
        (root / "pipeline.yaml").write_text(CHAIN.replace("lr: 0.1", "lr: 0.25"))
    elif change == "an overrides file":
        (root / "pipeline.overrides").write_text("stages.train.params.lr=0.5\n")
    elif change == "another build's state":  # a build with --set leaves train and report in another state
        assert _states(capsys, "--set", "stages.train.params.lr=0.5")["train"] == "ran"
    chain.ran()
    assert not _replays(capsys)
    assert _states(capsys) == expected
    assert len(chain.ran()) == sum(1 for s in expected.values() if s == "ran")


def test_a_file_added_inside_a_folder_dep_is_noticed(ws, settled, capsys):
    ws.write("images/a.txt", "a")
    ws.write("images/sub/b.txt", "b")
    ws.pipeline("stages:\n  count:\n    kind: run\n    cmd: ls images > n.txt\n    deps: [images]\n    outs: [n.txt]\n")
    _remembered(ws, capsys)
    ws.write("images/sub/c.txt", "c")  # one folder down: its folder's mtime moves, not the dep's own
    assert not _replays(capsys)
    assert _states(capsys) == {"count": "ran"}


def test_the_environment_counts_but_the_shells_bookkeeping_does_not(chain, capsys, monkeypatch):
    _remembered(chain, capsys)
    monkeypatch.setenv("OLDPWD", "/somewhere/else")
    monkeypatch.setenv("SHLVL", "7")
    assert _replays(capsys)
    monkeypatch.setenv("ASCENDPIPE_DB_WAIT", "5")  # any other variable might be read: decide again
    assert not _replays(capsys)


def test_the_database_rows_it_read_count_whoever_changed_them(chain, capsys):
    _remembered(chain, capsys)
    db = chain.root / ".ascendpipe/ascendpipe.db"
    with sqlite3.connect(db) as c:  # no file moves: only the recorded state
        c.execute("UPDATE stage_state SET metrics='{\"accuracy\": 0.5}' WHERE name='train'")
    assert not _replays(capsys)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE stage_state SET metrics='{}' WHERE name='train'")
    assert _replays(capsys)
    with sqlite3.connect(db) as c:  # another pipeline file holds report's output
        c.execute("UPDATE owners SET pipeline='other.yaml' WHERE path='data/report.txt'")
    chain.write("other.yaml", CHAIN)
    assert not _replays(capsys)
    assert main(list(ARGV)) == 2
    assert "is written by another pipeline in this workspace, other.yaml" in capsys.readouterr().err


def test_a_crashed_run_a_remote_and_a_second_pipeline_make_it_decide(chain, capsys):
    _remembered(chain, capsys)
    with sqlite3.connect(chain.root / ".ascendpipe/ascendpipe.db") as c:  # a build killed while running
        c.execute("INSERT INTO runs(pipeline, started, state, argv, backend, version) VALUES('pipeline.yaml', 'x', "
                  "'running', '[]', 'onnxruntime', '0.1.0')")
    assert not _replays(capsys)
    assert main(list(ARGV)) == 0
    assert "recorded as crashed" in capsys.readouterr().err
    assert _replays(capsys)  # marked crashed by the deciding build: the memo holds again

    (chain.root / ".ascendpipe/config.json").write_text(json.dumps({"remote": str(chain.root / "remote")}))
    assert not _replays(capsys)
    (chain.root / ".ascendpipe/config.json").unlink()
    _remembered(chain, capsys)

    chain.write("other.yaml", "stages:\n  other:\n    kind: run\n    cmd: echo x > other.txt\n    outs: [other.txt]\n")
    assert main(["build", "other.yaml", "-q"]) == 0  # its ownership claims are rows the decision reads
    capsys.readouterr()
    assert not _replays(capsys)


def test_a_new_workspace_marker_or_package_folder_is_noticed(tmp_path, settled, capsys, monkeypatch):
    from tests.engine.conftest import WS

    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    monkeypatch.chdir(root)
    ws = WS(root)
    ws.write("sub/pipeline.yaml", "stages:\n  a:\n    kind: convert\n    model: sub/m.onnx\n")
    from tests.modelzoo import l2norm_model

    l2norm_model(str(root / "sub/m.onnx"))
    argv = ["build", "sub/pipeline.yaml"]
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    for _ in range(2):
        assert main(list(argv)) == 0
    capsys.readouterr()
    assert replay(list(argv)) == 0
    capsys.readouterr()
    (site / "onnxruntime-99.0.dist-info").mkdir()  # an install: tool versions are in the keys
    assert replay(list(argv)) is None
    assert main(list(argv)) == 0  # decides (the version found first is still the installed one)
    assert main(list(argv)) == 0
    capsys.readouterr()
    assert replay(list(argv)) == 0
    capsys.readouterr()
    (root / "sub/.git").mkdir()  # the workspace is now sub/, with no state of its own
    assert replay(list(argv)) is None


def test_tool_versions_on_the_onnxruntime_backend_are_installed_packages_only(monkeypatch):
    """What lets a memo vouch for tool versions by stating sys.path's folders: every kind's versions
    on this backend come from versions.package_version (a kind or backend reading anything else
    must make _memo_facts refuse it)."""
    import ascendpipe.versions as versions
    from ascendpipe.stages.registry import KINDS, kind_facts, tool_versions

    asked = []
    monkeypatch.setattr(versions, "package_version", lambda dist: asked.append(dist) or f"v-{dist}")
    for module in [m for m in list(sys.modules) if m.startswith(("ascendpipe.stages.", "ascendpipe.backends."))]:
        for name, value in list(vars(sys.modules[module]).items()):
            if value is not None and getattr(value, "__name__", None) == "package_version":
                monkeypatch.setattr(sys.modules[module], name, versions.package_version)
    for kind in KINDS:
        if kind == "run":
            continue
        found = tool_versions(kind, "onnxruntime", kind_facts(kind))
        assert found, kind
        # op_lists (convert, tune: the mixed-precision lists, a CANN install's where found) is vouched for by the
        # memo's stats of the install's ops-info folders and files (noop_memo.ops_info_paths)
        assert all(v == f"v-{d}" for d, v in found.items() if d != "op_lists"), (kind, found)
        if "op_lists" in found:
            from ascendpipe.precision.lists import key

            assert found["op_lists"] == key()


def test_a_damaged_or_planted_memo_is_no_memo(chain, capsys):
    _remembered(chain, capsys)
    memo = _memo_file(chain)
    good = memo.read_text()
    for bad in ("{", "[]", json.dumps({**json.loads(good), "records": [{"name": "x"}]}),
                json.dumps({**json.loads(good), "keys": [1, "a"]})):
        memo.write_text(bad)
        assert not _replays(capsys)
    memo.unlink()
    os.mkfifo(memo)  # never opened for reading as a memo: a FIFO would block
    assert not _replays(capsys)
    memo.unlink()
    memo.symlink_to(chain.root / "elsewhere.json")
    (chain.root / "elsewhere.json").write_text(good)
    assert not _replays(capsys)
    assert set(_states(capsys).values()) == {"fresh"}  # the deciding build replaces the link with a memo
    assert memo.is_file() and not memo.is_symlink()


def test_the_code_stamp_sees_an_edit_of_the_same_size(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "stages").mkdir(parents=True)
    module = pkg / "stages" / "run.py"
    module.write_text('version = "1"\n')
    first = noop_memo.code_stamp(str(pkg))[0]
    module.write_text('version = "7"\n')
    st = os.stat(module)
    os.utime(module, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert noop_memo.code_stamp(str(pkg))[0] != first
    second = noop_memo.code_stamp(str(pkg))[0]
    (pkg / "new.py").write_text("")
    assert noop_memo.code_stamp(str(pkg))[0] != second
    memo = {"format": noop_memo.MEMO_FORMAT, "context": {"argv": ARGV}, "code": second}
    assert noop_memo.first_difference(memo, {"argv": ARGV}, second) is None
    assert noop_memo.first_difference(memo, {"argv": ARGV}, noop_memo.code_stamp(str(pkg))[0]) == "ascendpipe's code changed"
    assert noop_memo.first_difference(memo, {"argv": ["build", "other.yaml"]}, second) == "argv changed"


def test_no_memo_while_a_stat_is_racy(ws, capsys):
    """Without the fixture's settling: outputs written just now are not vouched for by their stat."""
    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    _build(capsys)
    _build(capsys)
    assert not _memo_file(ws).exists()
    assert not _replays(capsys)


def test_in_new_processes_the_second_noop_replays_and_an_edit_still_runs(ws):
    """As a user meets it: outputs settle past the racy window, the next no-op decides and remembers,
    the one after replays (no executor, no argparse imported) with the same lines, and an edited dep
    after that is decided and run."""
    import subprocess
    import time

    from tests.test_import_graph import PACKAGE_ROOT

    ws.write("input.txt", "hello")
    ws.pipeline(CHAIN)
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT.parent))
    probe = ("import sys\nfrom ascendpipe.cli.main import main\nrc = main(['build', 'pipeline.yaml'])\n"
             "print('decided' if 'ascendpipe.engine.executor' in sys.modules or 'argparse' in sys.modules else 'replayed')\n")

    def build():
        proc = subprocess.run([sys.executable, "-c", probe], cwd=ws.root, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        *lines, how = proc.stdout.splitlines()
        return how, [line for line in lines if " stages: " not in line]

    assert build()[0] == "decided"
    assert ws.ran() == ["prepare", "train", "report"]
    time.sleep(2.1)
    how, deciding = build()
    assert how == "decided"
    how, replayed = build()
    assert how == "replayed" and replayed == deciding
    assert any(line.split()[:2] == ["fresh", "train"] for line in replayed)
    (ws.root / "input.txt").write_text("hello, again")
    how, lines = build()
    assert how == "decided" and any(line.split()[:2] == ["ran", "prepare"] for line in lines)
    assert ws.ran() == ["prepare", "train", "report"]
