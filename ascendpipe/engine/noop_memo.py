"""The no-op memo: a no-op build's answer, kept with every input it was decided from.

A build with nothing to do still decides every stage: it resolves the pipeline (from the plan cache),
hashes every dep and out (through the stat cache), computes the keys and compares them with the
database's state. When that finds every stage fresh, the build writes down what the decision read
(``.ascendpipe/noop/<digest of the command line and folder>.json``):

- the command line, the folder it ran in, the interpreter, ``sys.path``, the environment (less the
  shell's own bookkeeping, ``VOLATILE_ENV``, which no build reads) and whether stdout is a colour
  terminal;
- a stamp of ascendpipe's code (the stat of every module): the kinds' versions, the key format and
  what a build prints are all in it;
- the stat of every file and folder it looked at: the pipeline and its overrides file, the folders
  the workspace was found through, the remote configuration, every dep and out (each file and each
  folder inside them), each ``sys.path`` folder (installed packages' versions are in the keys);
- a digest of the database rows the decision read: the pipeline's stage states, every ownership
  claim, the run-cache entries of its keys;
- what it recorded (the run's stage rows) and what it printed (before and after the summary line).

The next ``ascendpipe build PIPELINE`` with the same command line compares all of these first
(``engine/noop_replay.py``). Only when every one is unchanged does it record the run and print the
answer without deciding again: the same inputs give the same decision. Anything different, and the
build decides as it always does (and writes a new memo when it again finds nothing to do).

A stat is trusted as the stat cache trusts it (``store/hashing.py``): no memo is written while any
stat it names changed within the racy window, so a file rewritten within one clock tick of the
memo cannot hide behind an unchanged stat.
"""

from __future__ import annotations

import json
import os
import sys

MEMO_FORMAT = 1

# Kept out of the environment's digest: the shell sets them per command or per folder, and neither
# a build nor a stage's key reads them (a stage's environment is in its key only through the
# pipeline's declared `env:` names, which are never one of these).
VOLATILE_ENV = frozenset({"_", "OLDPWD", "PWD", "SHLVL", "COLUMNS", "LINES"})

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stat_sig(path: str) -> list | None:
    """What a stat says of ``path`` (following links, as the hasher does), or None when it is not there.
    Kind, inode, device, size and both timestamps: a rewrite, a replacement or a retargeted link shows."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mode, st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def ops_info_paths() -> list[str]:
    """A CANN install's ops-info folders and files (or where one would be): the emulated convert reads its
    mixed-precision lists there and keys on them (precision/opsinfo.py), so a new or changed install must
    not replay an old answer."""
    from ascendpipe.versions import ops_info_watched

    return ops_info_watched(os.environ)


def newest_ns(sigs) -> int:
    """The latest change time among ``sigs`` (the racy-window check)."""
    return max((max(s[4], s[5]) for s in sigs if s is not None), default=0)


def code_stamp(package: str = _PACKAGE) -> tuple[str, int]:
    """One digest of every module of ascendpipe (relative path, size, mtime, inode): any edit or
    upgrade changes it; and the latest change among them. Stat only: the sources are never read."""
    from ascendpipe.digest import sha256_hex

    parts = []
    newest = 0
    stack = [package]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.name == "__pycache__":
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif entry.name.endswith(".py"):
                try:
                    st = entry.stat()
                except OSError:
                    continue
                parts.append(f"{entry.path[len(package):]}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}")
                newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
    return sha256_hex("\n".join(parts).encode()), newest


def context(argv: list[str], cwd: str, colour: bool, environ=None) -> dict:
    """Everything about the process that a build's answer could depend on, apart from files."""
    from ascendpipe import __version__
    from ascendpipe.digest import sha256_hex

    environ = os.environ if environ is None else environ
    env = sorted((k, v) for k, v in environ.items() if k not in VOLATILE_ENV)
    return {
        "argv": list(argv),
        "cwd": cwd,
        "executable": sys.executable,
        "python": sys.version,
        "sys_path": list(sys.path),
        "env": sha256_hex(json.dumps(env).encode()),
        "colour": bool(colour),
        "ascendpipe": __version__,
    }


def memo_path(state_dir: str, argv: list[str], cwd: str) -> str:
    from ascendpipe.digest import sha256_hex

    return os.path.join(state_dir, "noop", sha256_hex(json.dumps([cwd, list(argv)]).encode())[:32] + ".json")


def workspace_folders(pipeline_path: str, workspace: str) -> list[str]:
    """The folders ``config.model.find_workspace`` looked in, from the pipeline's up to the workspace:
    a ``.ascendpipe`` or ``.git`` made in one of them (its mtime changes) moves the workspace."""
    folder = os.path.dirname(os.path.abspath(pipeline_path))
    folders = [folder]
    while folder != workspace:
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
        folders.append(folder)
    return folders


def first_difference(memo: dict, ctx: dict, stamp: str) -> str | None:
    """Why ``memo`` does not hold for this process (before any file is looked at), or None."""
    if memo.get("format") != MEMO_FORMAT:
        return "memo format"
    for key, value in ctx.items():
        if memo.get("context", {}).get(key) != value:
            return f"{key} changed"
    if memo.get("code") != stamp:
        return "ascendpipe's code changed"
    return None


def changed_file(memo: dict) -> str | None:
    """The first file or folder whose stat differs from the memo's, or None."""
    for path, sig in memo.get("files", {}).items():
        if stat_sig(path) != sig:
            return path
    return None


_SHAPE = {"format": int, "context": dict, "code": str, "workspace": str, "files": dict, "db": str, "keys": list,
          "run": dict, "records": list, "printed": list}


def load(path: str) -> dict | None:
    """The memo at ``path``, or None when there is none or it is not one (a damaged or planted file:
    never a link, a FIFO or a device, never an error). Its folder linked out of the workspace is
    ``statefiles.link_error``: a memo planted there is never read."""
    from ascendpipe.store.statefiles import read_state_file

    raw = read_state_file(os.path.dirname(os.path.dirname(path)), path, "the no-op memo folder")
    try:
        memo = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    if not isinstance(memo, dict) or any(not isinstance(memo.get(k), t) for k, t in _SHAPE.items()):
        return None
    run, printed = memo["run"], memo["printed"]
    if (len(printed) != 2 or not all(isinstance(p, str) for p in printed)
            or not all(isinstance(run.get(k), str) for k in ("pipeline", "backend", "version"))
            or not all(isinstance(k, str) for k in memo["keys"])
            or not all(isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("kind"), str)
                       and r.get("state") == "fresh" for r in memo["records"])):
        return None
    return memo


def save(path: str, memo: dict) -> None:
    """Atomically, never through a link; a workspace that cannot take it only decides again next time."""
    from ascendpipe.store.statefiles import write_state_file

    try:
        write_state_file(os.path.dirname(os.path.dirname(path)), path, json.dumps(memo, default=str).encode(),
                         "the no-op memo folder")
    except OSError:
        pass


def forget(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class Recorder:
    """Started before a build reads anything (so each stat is from before what it vouches for), it
    keeps the process's context and the stats of the files outside the hasher's reach; ``save``
    adds the hasher's stats, the database digest, the records and the printed text."""

    def __init__(self, argv: list[str], pipeline_path: str):
        from ascendpipe.config.model import find_workspace
        from ascendpipe.config.overrides import overrides_file

        self.argv = list(argv)
        self.cwd = os.getcwd()
        self.code, self._code_newest = code_stamp()
        self.workspace = find_workspace(pipeline_path)
        self.environ = dict(os.environ)
        self._overrides = os.path.abspath(overrides_file(pipeline_path))
        paths = [os.path.abspath(pipeline_path), self._overrides,
                 os.path.join(self.workspace, ".ascendpipe", "config.json"),
                 *workspace_folders(pipeline_path, self.workspace), *(os.path.abspath(e or ".") for e in sys.path),
                 *ops_info_paths()]
        self.files = {p: stat_sig(p) for p in paths}

    @staticmethod
    def facts(executor, order: list[str], records: list[dict], version: str) -> dict | None:
        """What a memo of this no-op takes from the database (under the lock, as decided), or None
        where its decision read more than a memo vouches for: on the onnxruntime backend every tool
        version is an installed package's (``versions.package_version``, whose ``sys.path`` folders
        the memo stats); on the ascend backend they come from the CANN toolkit's files, which it does not."""
        from ascendpipe.backends.registry import DEFAULT

        pipeline = executor.pipeline
        for name in order:
            stage = pipeline.stages[name]
            if stage.kind != "run" and executor._facts(stage)["uses_backend"] and pipeline.backend != DEFAULT:
                return None
        keys = [executor.keys[name] for name in order]
        return {"records": records, "keys": keys, "db_digest": executor.db.decision_digest(executor.pipeline_key, keys),
                "run": {"pipeline": executor.pipeline_key, "backend": pipeline.backend, "version": version}}

    def save(self, state_dir: str, *, colour: bool, observed: dict, records: list[dict], keys: list[str],
             db_digest: str, run: dict, before: str, after: str) -> bool:
        """Write the memo, unless a stat it would trust is racy. Returns whether it was written."""
        import time

        from ascendpipe.store.hashing import RACY_WINDOW_NS

        path = memo_path(state_dir, self.argv, self.cwd)
        files = {**self.files, **observed}
        if files[self._overrides] is not None:  # the replay leaves that case to a deciding build (its note)
            forget(path)
            return False
        if max(newest_ns(files.values()), self._code_newest) > time.time_ns() - RACY_WINDOW_NS:
            forget(path)  # the next no-op decides, and remembers once the stats have settled
            return False
        save(path, {
            "format": MEMO_FORMAT,
            "context": context(self.argv, self.cwd, colour, self.environ),
            "code": self.code,
            "workspace": self.workspace,
            "files": files,
            "db": db_digest,
            "keys": keys,
            "run": run,
            "records": [{k: v for k, v in r.items() if k not in ("components", "remedy_blobs")} for r in records],
            "printed": [before, after],
        })
        return True



def replayable(argv: list[str]) -> tuple[str, bool] | None:
    """``(pipeline, quiet)`` when ``argv`` is ``build PIPELINE`` with at most ``-q``; else None
    (any other flag or a stage name: the build decides as always)."""
    if not argv or argv[0] != "build":
        return None
    rest = argv[1:]
    quiet = any(a in ("-q", "--quiet") for a in rest)
    named = [a for a in rest if a not in ("-q", "--quiet")]
    if len(named) != 1 or named[0].startswith("-") or not named[0]:
        return None
    return named[0], quiet
