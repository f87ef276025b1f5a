"""A knowledge bank as convert takes it (AOE's TUNE_BANK_PATH on the emulation): read, checked against
the model being converted, its session settings written to ``runtime.json``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ascendpipe.errors import Location, UserError
from ascendpipe.fsutil import write_json_atomic


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_bank(bank_path: str) -> tuple[dict, dict]:
    """The bank and its ``session``, checked as the next infer would check them (a located UserError)."""
    from ascendpipe.backends.onnxruntime.session import session_options

    where = Location(file=bank_path, field="tune_bank")
    try:
        bank = json.loads(Path(bank_path).read_text())
    except OSError as exc:
        raise UserError(f"cannot read tune bank: {exc.strerror}", where) from None
    except json.JSONDecodeError as exc:
        raise UserError(f"tune bank is not JSON: {exc.msg} (line {exc.lineno})", where) from None
    if not isinstance(bank, dict):
        raise UserError("tune bank must be a JSON object at the top level", where)
    session = bank.get("session", {})
    if not isinstance(session, dict):
        raise UserError("tune bank 'session' must be an object", where)
    session_options(session, fusions=True, where=where)  # what the next infer would refuse, refused now
    return bank, session


def bank_runtime(bank_path: str | None, out_dir: Path, model_path: Path, model_sha256: str) -> dict | None:
    """The bank's ``session`` settings, written to ``out_dir/runtime.json`` (None without a bank). A bank
    tuned on another model is refused, naming both (``aoe_result.bank_model_mismatch``)."""
    from ascendpipe.profiling.aoe_result import bank_model_mismatch

    if not bank_path:
        return None
    where = Location(file=bank_path, field="tune_bank")
    bank, session = read_bank(bank_path)
    mismatch = bank_model_mismatch(bank, model_sha256, Path(model_path).name)
    if mismatch:
        raise UserError(mismatch, where)
    # the contract (docs/contracts.md): {"session": {...}}, what session.read_runtime reads
    write_json_atomic(Path(out_dir) / "runtime.json", {"session": session, "tune_bank": str(bank_path)},
                      sort_keys=True)
    return session
