"""fix's journal: each attempt's result written as it ends, so a stopped search resumes where it was.

A journal is a folder: ``journal.json`` (the arguments that decide every result, as a digest, and what
they were) and ``attempt-NNN.json`` (one per evaluation: the remedy, the ``Result`` the search reads, and
the evaluator's own state: a pipeline attempt's run id and stage keys), each written atomically as the
evaluation ends (``fsutil``): a search killed, interrupted or failed part-way keeps every attempt it
finished. The op edges and op lists every result repeats are written once, named by their digest.

``JournaledEvaluator`` wraps an evaluator: a remedy the journal holds is answered from it (the result
marked ``resumed``, no evaluation); any other is evaluated and written. The search itself is
deterministic given the results, so a rerun with the same arguments asks for the same remedies in the
same order and only evaluates what the journal lacks; ``--max-attempts`` may grow between runs. A
journal written for other arguments (another model, input, mode or SoC; for a pipeline, other stage keys
at the baseline) is cleared before it is used, never read.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ascendpipe.digest import sha256_hex
from ascendpipe.fix.core import Candidate, Result
from ascendpipe.fsutil import write_text_atomic

META = "journal.json"
FORMAT = 1
_SHARED = ("producers", "ops")  # large, the same in most results: written once, named by their digest


def _plain(value):
    """JSON-able: numpy scalars and arrays as numbers and lists, sets as sorted lists."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def digest(data) -> str:
    return sha256_hex(json.dumps(_plain(data), sort_keys=True, default=str).encode())


def result_to_json(result: Result) -> dict:
    data = {
        "passed": result.passed, "metric": result.metric, "output_cosine": result.output_cosine,
        "rows": result.rows, "failure": result.failure, "ops": result.ops, "note": result.note,
        "candidates": None if result.candidates is None else sorted(result.candidates),
        "producers": result.producers, "blocked": result.blocked, "samples": result.samples,
        "causes": result.causes, "seconds": result.seconds, "impl_remedies": result.impl_remedies,
    }
    cases = getattr(result, "cases", None)
    if cases is not None:  # fix.cases.CasesResult
        data["cases"] = [{"label": c.label, "passed": c.passed, "metric": c.metric, "failure": c.failure}
                         for c in cases]
        data["case_rows"] = result.case_rows
    return _plain(data)


def result_from_json(data: dict) -> Result:
    import numpy as np

    fields = dict(data)
    cases, case_rows = fields.pop("cases", None), fields.pop("case_rows", None)
    candidates = fields.pop("candidates")
    samples = fields.pop("samples")
    fields["candidates"] = None if candidates is None else frozenset(candidates)
    fields["samples"] = None if samples is None else np.asarray(samples)
    if cases is None:
        return Result(**fields, resumed=True)
    from ascendpipe.fix.cases import CaseResult, CasesResult

    return CasesResult(**fields, resumed=True, cases=[CaseResult(**c) for c in cases], case_rows=case_rows or [])


def remedy_key(remedy) -> list[list[str]]:
    return sorted([c.kind, c.name] for c in remedy)


class Journal:
    """The attempts of one search, kept in ``folder`` (see the module docstring)."""

    def __init__(self, folder: Path, arguments: dict):
        self.folder = Path(folder)
        self.arguments = _plain(arguments)
        self.key = digest(self.arguments)
        self.entries: dict[frozenset, tuple[Result, dict]] = {}
        self.count = 0
        self.loaded = 0
        meta = self._read(self.folder / META)
        if meta and meta.get("key") == self.key and meta.get("format") == FORMAT:
            self._load()
        elif self.folder.exists():
            self.clear()

    @staticmethod
    def _read(path: Path) -> dict | None:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None  # a missing or cut file: the attempt is evaluated again
        return data if isinstance(data, dict) else None

    def _load(self) -> None:
        for path in sorted(self.folder.glob("attempt-*.json")):
            data = self._read(path)
            if not data or "remedy" not in data or "result" not in data:
                continue
            result = data["result"]
            for name in _SHARED:
                ref = result.get(f"{name}_ref")
                if ref is not None:
                    shared = self._read(self.folder / f"{name}-{ref}.json")
                    if shared is None:
                        break
                    result[name] = shared["value"]
                    del result[f"{name}_ref"]
            else:
                remedy = frozenset(Candidate(kind, name) for kind, name in data["remedy"])
                self.entries[remedy] = (result_from_json(result), data.get("state") or {})
                self.count = max(self.count, int(data.get("number", 0)))
        self.loaded = len(self.entries)

    def clear(self) -> None:
        """Forget what an earlier search wrote here (other arguments, or other stage keys)."""
        for path in list(self.folder.glob("attempt-*.json")) + [self.folder / META] + [
                p for name in _SHARED for p in self.folder.glob(f"{name}-*.json")]:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        self.entries, self.count, self.loaded = {}, 0, 0

    def get(self, remedy: frozenset) -> tuple[Result, dict] | None:
        return self.entries.get(frozenset(remedy))

    def put(self, remedy: frozenset, result: Result, state: dict | None = None) -> None:
        if not self.entries and not (self.folder / META).exists():
            write_text_atomic(self.folder / META, json.dumps({"format": FORMAT, "key": self.key,
                                                               "arguments": self.arguments}, indent=1) + "\n")
        data = result_to_json(result)
        for name in _SHARED:
            value = data.get(name)
            if value:
                ref = digest(value)[:16]
                path = self.folder / f"{name}-{ref}.json"
                if not path.exists():
                    write_text_atomic(path, json.dumps({"value": value}))
                data[f"{name}_ref"] = ref
                del data[name]
        self.count += 1
        entry = {"number": self.count, "remedy": remedy_key(remedy), "result": data, "state": _plain(state or {})}
        write_text_atomic(self.folder / f"attempt-{self.count:04d}.json", json.dumps(entry, allow_nan=True) + "\n")
        self.entries[frozenset(remedy)] = (result, state or {})

    def remove(self) -> None:
        """Drop the whole journal (a finished search whose journal lives in the user's cache)."""
        shutil.rmtree(self.folder, ignore_errors=True)


class JournaledEvaluator:
    """An evaluator answering from a journal where it can (see the module docstring).

    ``check_first``: evaluate the first remedy asked for (the baseline) for real and compare the inner
    evaluator's ``journal_state()['check']`` with the journal's: different (a pipeline whose stages
    changed since) clears the journal. The inner evaluator may have ``journal_state()`` (what to keep
    beside the result) and ``resume(state, result)`` (take up a kept attempt: its run id, its golden metric)."""

    def __init__(self, inner, journal: Journal, *, check_first: bool = False):
        self.inner, self.journal, self.check_first = inner, journal, check_first
        self.evaluations = 0

    def __getattr__(self, name):  # full_remedy, order, labels, runs...: the inner evaluator's
        return getattr(self.inner, name)

    def evaluate(self, remedy: frozenset) -> Result:
        if self.check_first:
            self.check_first = False
            return self._fresh(remedy, compare=True)
        kept = self.journal.get(remedy)
        if kept is not None:
            result, state = kept
            resume = getattr(self.inner, "resume", None)
            if resume is not None:
                resume(state, result)
            result.resumed = True
            return result
        return self._fresh(remedy)

    def _fresh(self, remedy: frozenset, compare: bool = False) -> Result:
        result = self.inner.evaluate(remedy)
        self.evaluations += 1
        state_of = getattr(self.inner, "journal_state", None)
        state = state_of() if state_of is not None else {}
        if compare:
            kept = self.journal.get(remedy)
            if kept is not None and kept[1].get("check") != state.get("check"):
                self.journal.clear()
            elif kept is not None:  # the same stages: the journal holds; this attempt is the one it kept
                return result
        self.journal.put(remedy, result, state)
        return result


def cache_folder(key: str) -> Path:
    """Where a standalone fix without ``--output`` keeps its journal: the user's cache."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ascendpipe" / "fix" / key[:16]


def model_digest(path: Path) -> str:
    """A model file's content digest, with the name, size and modification time of each external-data
    file it references (weights of several GB are not read again at each fix: a changed file changes
    its size or time)."""
    from ascendpipe.store.hashing import hash_file

    parts = [hash_file(str(path))]
    try:
        from ascendpipe.onnxexternal import external_info, initializers, is_external
        from ascendpipe.onnxgraph import load_graph

        model = load_graph(path)
        locations = sorted({external_info(t)[0] for t in initializers(model) if is_external(t)})
    except Exception:  # noqa: BLE001 - a model the loader refuses is refused with its own message elsewhere
        locations = []
    for location in locations:
        try:
            st = (Path(path).parent / location).stat()
            parts.append(f"{location}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            parts.append(f"{location}:missing")
    return digest(parts)


def feeds_digest(feeds: dict) -> str:
    import numpy as np

    from ascendpipe.digest import sha256

    h = sha256()
    for name in sorted(feeds):
        a = np.ascontiguousarray(feeds[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


_CODE = ("compare", "precision", "fix", "backends/onnxruntime")


def code_digest() -> str:
    """The digest of the code that decides a result (compare, the precision rules, the emulation, fix):
    a journal written by other code is cleared, never read (its results could differ)."""
    from ascendpipe.digest import sha256

    root = Path(__file__).resolve().parents[1]
    h = sha256()
    for part in _CODE:
        for path in sorted((root / part).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode() + b"\0")
            h.update(path.read_bytes())
    return h.hexdigest()
