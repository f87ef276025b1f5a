"""What ``fix`` shows and writes: the attempt table, the YAML lines, the remedy files, the JSON.

Formatting is pure; ``write_remedy_files`` is the only I/O (atomic writes, ATC's file formats).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ascendpipe.fix.search import Outcome, metric_text
from ascendpipe.fsutil import write_text_atomic
from ascendpipe.precision import remedy as remedy_files
from ascendpipe.precision.settings import REMEDY_NAMES

SUMMARY_FILE = "fix.json"


def _num(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return metric_text(value)


def attempt_rows(outcome: Outcome) -> list[dict]:
    return [{"attempt": a.number, "phase": a.phase, "remedy": [str(c) for c in a.remedy], "passed": a.result.passed,
             "metric": a.result.metric, "output_cosine": a.result.output_cosine, "note": a.result.note}
            for a in outcome.attempts]


RESTORE_NOTE = "the workspace back as the pipeline file says (from the cache)"


def attempt_table(outcome: Outcome, metric_name: str, restore_run: int | None = None) -> str:
    """One row per attempt and, in pipeline mode, one for the last build ``fix`` records
    (``restore_run``): every run it made is in the table."""
    from ascendpipe.cli.common import table

    from ascendpipe.compare.writers import op_labels

    both = metric_name != "output cosine"  # standalone mode judges the output cosine itself
    # long remedy sets cut in the middle, widened until no two different sets read alike
    texts = op_labels([", ".join(str(c) for c in a.remedy) or "(none)" for a in outcome.attempts], width=60, widest=160)
    rows = [[str(a.number), a.phase, text, _num(a.result.metric),
             *([_num(a.result.output_cosine)] if both else []), "yes" if a.result.passed else "no", a.result.note]
            for a, text in zip(outcome.attempts, texts)]
    if restore_run is not None:
        rows.append(["", "restore", "(as the pipeline file says)", "", *([""] if both else []), "",
                     f"run {restore_run}; {RESTORE_NOTE}"])
    return table(rows, ["#", "phase", "remedy set", metric_name, *(["output cosine"] if both else []), "target", "note"])


def yaml_lines(stage_prefix: str, keep: list[str], fusion: dict[str, str]) -> str:
    """YAML that applies the remedy, nested under ``stage_prefix`` ('stages.convert.matrix.fp16')."""
    if not keep and not fusion:
        return ""
    parts = stage_prefix.split(".")
    lines = [f"{'  ' * i}{part}:" for i, part in enumerate(parts)]
    indent = "  " * len(parts)
    if keep:
        lines.append(f"{indent}keep_dtype: [{', '.join(json.dumps(k) for k in keep)}]")
    if fusion:
        lines.append(f"{indent}fusion_switch: {{{', '.join(f'{json.dumps(r)}: {json.dumps(v)}' for r, v in fusion.items())}}}")
    return "\n".join(lines) + "\n"


def named_matrix_yaml(base: str, matrix: dict, variant: str, keep: list[str], fusion: dict[str, str]) -> str:
    """A list-form matrix (``precision_mode: [force_fp32, force_fp16]``) cannot take one variant's overlay
    beside its lists (validate refuses the mix): the YAML that replaces it by its named form, the same
    variants in the same order, ``variant`` with the remedy."""
    import itertools

    import yaml

    keys = list(matrix)
    named = {}
    for combo in itertools.product(*(matrix[k] for k in keys)):
        name = "-".join(str(v) for v in combo)
        overlay = dict(zip(keys, combo))
        if name == variant:
            overlay.update({**({"keep_dtype": list(keep)} if keep else {}),
                            **({"fusion_switch": dict(fusion)} if fusion else {})})
        named[name] = overlay
    body = yaml.safe_dump({"stages": {base: {"matrix": named}}}, sort_keys=False, default_flow_style=None, width=200)
    return f"# replaces stages.{base}.matrix (its list form, in named form: the same variants)\n" + body


def is_list_matrix(matrix) -> bool:
    return isinstance(matrix, dict) and bool(matrix) and all(isinstance(v, list) and v for v in matrix.values())


def overrides(stage_prefix: str, keep: list[str], fusion: dict[str, str]) -> list[str]:
    """``KEY=VALUE`` overrides (the engine's ``--set`` grammar) that apply a remedy."""
    items = []
    if keep:
        items.append(f"{stage_prefix}.keep_dtype={json.dumps(keep)}")
    if fusion:
        items.append(f"{stage_prefix}.fusion_switch={json.dumps(fusion)}")
    return items


def set_lines(stage_prefix: str, keep: list[str], fusion: dict[str, str]) -> list[str]:
    """The same overrides as shell arguments, ready to paste."""
    return [f"--set '{item}'" for item in overrides(stage_prefix, keep, fusion)]


def summary(outcome: Outcome, keep: list[str], fusion: dict[str, str], **extra) -> dict:
    """The ``--json`` object: keep_dtype, fusion_switch, metric, attempts, plus the details."""
    final = outcome.final
    return {
        "keep_dtype": keep,
        "fusion_switch": fusion,
        "metric": final.metric if final else None,
        "attempts": len(outcome.attempts),
        "passed": outcome.passed,
        "minimal": outcome.minimal,
        "output_cosine": final.output_cosine if final else None,
        "message": outcome.message,
        **extra,
        "table": attempt_rows(outcome),
    }


def write_remedy_files(out_dir: Path, keep: list[str], fusion: dict[str, str], data: dict) -> dict[str, Path]:
    """keep_dtype.cfg and fusion_switch.cfg in ATC's formats (only those in use) and fix.json."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, text in (("keep_dtype", remedy_files.format_keep_dtype(keep) if keep else None),
                       ("fusion_switch", remedy_files.format_fusion_switch(fusion) if fusion else None)):
        path = out_dir / REMEDY_NAMES[name]
        if text is None:
            path.unlink(missing_ok=True)  # a stale file from an earlier run would mislead
            continue
        written[name] = write_text_atomic(path, text)
    written["summary"] = write_text_atomic(out_dir / SUMMARY_FILE, json.dumps(data, indent=2, default=str) + "\n")
    return written


def terminal_text(outcome: Outcome, metric_name: str, keep: list[str], fusion: dict[str, str], stage_prefix: str,
                  written: dict[str, Path], target_text: str, restore_run: int | None = None,
                  yaml_text: str | None = None) -> str:
    """``yaml_text``: the YAML to print instead of ``yaml_lines`` (a list-form matrix's named form)."""
    out = [f"target: {target_text}", "", attempt_table(outcome, metric_name, restore_run), outcome.message]
    if outcome.passed and (keep or fusion):
        out += ["", "apply it with these YAML lines:", (yaml_text or yaml_lines(stage_prefix, keep, fusion)).rstrip(),
                "", "or on the command line:", *set_lines(stage_prefix, keep, fusion)]
    if written:
        out += ["", "written: " + ", ".join(str(p) for p in written.values())]
    return "\n".join(out) + "\n"


def cases_text(data: dict) -> str:
    """With several (model, input) cases: each case's verdict under the answer, and which cases each
    remedy was needed for (``fix.cases.needed_for``). Empty for one case."""
    cases = data.get("cases") or []
    if not cases:
        return ""
    out = ["", "cases (one keep set for all):"]
    for case in cases:
        verdict = "-" if case["passed"] is None else ("passes" if case["passed"] else "fails")
        out.append(f"  {case['label']}: {verdict}, output cosine {_num(case['output_cosine'])}")
    needed = data.get("needed_for") or {}
    if needed:
        out.append("each remedy is needed for:")
        for remedy, labels in needed.items():
            shown = ", ".join(labels) if labels else ("not measured (the shrink kept it without a trial of the set "
                                                      "less it)" if labels is None else "no case alone")
            out.append(f"  {remedy}: {shown}")
    return "\n".join(out) + "\n"
