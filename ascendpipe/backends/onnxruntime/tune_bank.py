"""A knowledge bank as convert takes it (AOE's TUNE_BANK_PATH on the emulation): read, checked against
the model being converted, its session settings written to ``runtime.json``."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ascendpipe.errors import Location, UserError
from ascendpipe.fsutil import write_json_atomic


# More threads than this is no CPU's: onnxruntime would try to start them all (1e8: infer never returned)
MAX_THREADS = 1024


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
    from ascendpipe.userfile import load_json

    try:
        bank = load_json(bank_path, "tune bank")  # unreadable, not JSON, nested past reading: one line
    except UserError as err:
        raise UserError(err.message, Location(field="tune_bank"), hint=err.hint) from None
    if not isinstance(bank, dict):
        raise UserError("tune bank must be a JSON object at the top level", where)
    from ascendpipe.profiling.aoe_result import BANK_FORMAT

    fmt = bank.get("format", BANK_FORMAT)  # a hand-written bank may leave it out
    if fmt != BANK_FORMAT:
        raise UserError(f"format: {fmt!r} is not a tune bank format this ascendpipe reads ({BANK_FORMAT}); "
                        "a bank written by a newer ascendpipe needs that version, or tune again", where)
    session = bank.get("session", {})
    if not isinstance(session, dict):
        raise UserError("tune bank 'session' must be an object", where)
    for key in ("intra_op_num_threads", "inter_op_num_threads"):
        value = session.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_THREADS:
            raise UserError(f"session.{key}: {value!r} is not a thread count (a whole number 0..{MAX_THREADS}; 0: "
                            "onnxruntime's choice)", where)
    disabled = session.get("disabled_optimizers", [])
    if not isinstance(disabled, list) or not all(isinstance(d, str) for d in disabled):
        raise UserError(f"session.disabled_optimizers: {disabled!r} is not a list of optimizer names", where)
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
