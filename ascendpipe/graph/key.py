"""Stage keys and staleness decisions. Pure: hashes and records are handed in.

A stage's key is the hash of its *components*: kind and kind version, resolved params, the command,
the content hash of every dep, the role of every input (``inputs``: ``{field: path}``, e.g. a
compare's ``golden`` and ``target``), the tool versions the kind reports, the backend and the declared
outputs. Two builds with equal components produce the same outputs, so the key indexes the run-cache.
``deps`` alone (``{path: hash}``) would not see two inputs trade places: with ``inputs`` beside it the
key holds each role's content. Path params (``keep_dtype: f.cfg``) are keyed by name in ``params``.
Keeping the components (not only the hash) lets us say *why* a stage is stale.
"""

from __future__ import annotations

import json

from ascendpipe.digest import sha256_hex

# bump when the components' meaning changes: every stage becomes stale once
KEY_FORMAT = 2  # 2: inputs by role ({field: path}); 1: deps only, blind to swapped roles


def canonical(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def components(stage, kind_version: str, dep_hashes: dict[str, str], tools: dict[str, str], backend: str, extra: dict | None = None) -> dict:
    comp = {
        "format": KEY_FORMAT,
        "kind": stage.kind,
        "kind_version": kind_version,
        "params": stage.params,
        "cmd": stage.cmd,
        "deps": dep_hashes,
        "inputs": dict(stage.inputs),  # field -> path: the role each dep plays
        "tools": tools,
        "outs": sorted(stage.outs),
        "env": stage.env_used,
    }
    if backend is not None:  # None for kinds whose outputs do not depend on the backend
        comp["backend"] = backend
    if extra:
        comp.update(extra)
    return comp


def key_of(comp: dict) -> str:
    return sha256_hex(canonical(comp).encode())


class Decision:
    def __init__(self, stale: bool, reasons=None):
        self.stale = stale
        self.reasons = list(reasons or [])

    def __repr__(self):
        return f"Decision(stale={self.stale}, reasons={self.reasons})"


def _short(value) -> str:
    text = value if isinstance(value, str) else canonical(value)
    return text if len(text) <= 60 else text[:57] + "..."


def explain(old: dict | None, new: dict) -> list[str]:
    """Human reasons for the difference between recorded and current components."""
    if old is None:
        return ["never built"]
    reasons: list[str] = []
    if old.get("format") != new.get("format"):
        reasons.append("ascendpipe's key format changed")
    if old.get("kind") != new.get("kind"):
        reasons.append(f"kind {old.get('kind')} -> {new.get('kind')}")
    elif old.get("kind_version") != new.get("kind_version"):
        reasons.append(f"kind version {old.get('kind_version')} -> {new.get('kind_version')}")
    if old.get("backend") != new.get("backend"):
        reasons.append(f"backend {old.get('backend')} -> {new.get('backend')}")
    op, np_ = old.get("params") or {}, new.get("params") or {}
    for k in sorted(set(op) | set(np_)):
        if k not in op:
            reasons.append(f"param {k} added: {_short(np_[k])}")
        elif k not in np_:
            reasons.append(f"param {k} removed (was {_short(op[k])})")
        elif canonical(op[k]) != canonical(np_[k]):
            reasons.append(f"param {k}: {_short(op[k])} -> {_short(np_[k])}")
    explained: set = set()
    if "inputs" in old and "inputs" in new:
        reasons.extend(role_reasons(old["inputs"] or {}, new["inputs"] or {}, explained))
    od, nd = old.get("deps") or {}, new.get("deps") or {}
    for d in sorted(set(od) | set(nd)):
        if d in explained and (d not in od or d not in nd):
            continue  # said as a role change ("golden: a -> b")
        if d not in od:
            reasons.append(f"dep {d} added")
        elif d not in nd:
            reasons.append(f"dep {d} removed")
        elif od[d] != nd[d]:
            reasons.append(f"dep {d} {'deleted' if nd[d] is None else 'modified'}")
    if old.get("cmd") != new.get("cmd"):
        reasons.append(f"cmd changed: {_short(old.get('cmd'))} -> {_short(new.get('cmd'))}")
    ot, nt = old.get("tools") or {}, new.get("tools") or {}
    for t in sorted(set(ot) | set(nt)):
        if t not in ot:
            reasons.append(f"tool {t} {nt[t]} added")
        elif t not in nt:
            reasons.append(f"tool {t} no longer used")
        elif ot[t] != nt[t]:
            reasons.append(f"tool {t} {ot[t]} -> {nt[t]}")
    if (old.get("env") or {}) != (new.get("env") or {}):
        reasons.append("environment variables used by the stage changed")
    if old.get("outs") != new.get("outs"):
        reasons.append("declared outs changed")
    for k in sorted(set(old) | set(new)):
        if k not in ("format", "kind", "kind_version", "cmd", "backend", "params", "deps", "inputs", "tools", "env", "outs"):
            if canonical(old.get(k)) != canonical(new.get(k)):
                reasons.append(f"{k} changed")
    return reasons or ["key changed"]


def role_reasons(old: dict, new: dict, explained: set | None = None) -> list[str]:
    """What changed in the inputs by role: ``golden and target swapped`` when two fields traded
    their paths, else ``golden: a -> b``, ``inputs added: p``, ``inputs removed (was p)``. The paths
    named go into ``explained`` (their dep added/removed lines would only repeat it)."""
    explained = explained if explained is not None else set()
    changed = sorted(f for f in set(old) | set(new) if old.get(f) != new.get(f))
    reasons: list[str] = []
    done: set = set()
    for i, a in enumerate(changed):
        for b in changed[i + 1:]:
            if a in done or b in done or None in (old.get(a), old.get(b), new.get(a), new.get(b)):
                continue
            if old[a] == new[b] and old[b] == new[a]:
                reasons.append(f"{a} and {b} swapped")
                done.update((a, b))
    for f in changed:
        if f in done:
            continue
        if f not in old:
            reasons.append(f"{f} added: {new[f]}")
        elif f not in new:
            reasons.append(f"{f} removed (was {old[f]})")
        else:
            reasons.append(f"{f}: {old[f]} -> {new[f]}")
        explained.update(p for p in (old.get(f), new.get(f)) if p is not None)
    return reasons


def out_reasons(recorded: dict[str, str], current: dict[str, str | None]) -> list[str]:
    reasons = []
    for path in sorted(recorded):
        now = current.get(path)
        if now is None:
            reasons.append(f"out {path} missing")
        elif now != recorded[path]:
            reasons.append(f"out {path} modified")
    return reasons


def folder_reasons(path: str, old: list[dict], new: list[dict], what: str = "out") -> list[str]:
    """Which files of the folder ``path`` (an ``out`` or a ``dep``) differ from its recorded manifest, each named."""
    before, after = {e["path"]: e["hash"] for e in old}, {e["path"]: e["hash"] for e in new}
    reasons = []
    for name in sorted(set(before) | set(after)):
        if name not in after:
            reasons.append(f"{what} {path}/{name} deleted")
        elif name not in before:
            reasons.append(f"{what} {path}/{name} added")
        elif before[name] != after[name]:
            reasons.append(f"{what} {path}/{name} modified")
    return reasons


def decide(old_components: dict | None, old_outs: dict | None, new_components: dict, current_outs: dict,
           always_changed: bool = False, *, old_key: str | None = None, new_key: str | None = None) -> Decision:
    """Stale when the key changed (reasons from the components) or an output differs from the record.

    ``old_key`` / ``new_key`` spare re-hashing components the caller already hashed."""
    if always_changed:
        return Decision(True, ["always_changed is set"])
    if old_components is None:
        return Decision(True, explain(None, new_components))
    if (old_key or key_of(old_components)) != (new_key or key_of(new_components)):
        return Decision(True, explain(old_components, new_components))
    reasons = out_reasons(old_outs or {}, current_outs)
    return Decision(bool(reasons), reasons)
