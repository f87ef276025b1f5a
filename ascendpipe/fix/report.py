"""What ``fix`` shows and writes: the attempt table, the YAML lines, the remedy files, the JSON.

Formatting is pure; ``write_remedy_files`` is the only I/O (atomic writes, ATC's file formats).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ascendpipe.fix.search import Outcome, metric_text
from ascendpipe.fix.terminal import remedy_text, terminal_width
from ascendpipe.fsutil import write_text_atomic
from ascendpipe.precision import impl_remedy
from ascendpipe.precision import remedy as remedy_files
from ascendpipe.precision.settings import REMEDY_NAMES

SUMMARY_FILE = "fix.json"
IMPL_FILE = impl_remedy.FILE_NAME  # op_precision_mode.ini


def _num(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return metric_text(value)


def attempt_rows(outcome: Outcome) -> list[dict]:
    return [{"attempt": a.number, "phase": a.phase, "remedy": [str(c) for c in a.remedy], "passed": a.result.passed,
             "metric": a.result.metric, "output_cosine": a.result.output_cosine, "note": a.result.note,
             "resumed": a.result.resumed, "seconds": a.result.seconds}
            for a in outcome.attempts]


RESTORE_NOTE = "the workspace back as the pipeline file says (from the cache)"


def attempt_table(outcome: Outcome, metric_name: str, restore_run: int | None = None, width: int | None = None) -> str:
    """One row per attempt and, in pipeline mode, one for the last build ``fix`` records
    (``restore_run``): every run it made is in the table. Rows fit ``width`` (the terminal's): a long
    remedy set is abbreviated with a count (``remedy_text``) and a long note cut; fix.json has both in full."""
    from ascendpipe.cli.common import table

    width = width or terminal_width(default=120)
    both = metric_name != "output cosine"  # standalone mode judges the output cosine itself
    values = [[str(a.number), a.phase, _num(a.result.metric), *([_num(a.result.output_cosine)] if both else []),
               "yes" if a.result.passed else "no"] for a in outcome.attempts]
    header = ["#", "phase", "remedy set", metric_name, *(["output cosine"] if both else []), "target", "note"]
    fixed = [max([len(header[i if i < 2 else i + 1])] + [len(v[i]) for v in values]) for i in range(len(values[0]))] \
        if values else [1]
    spare = width - sum(fixed) - 2 * (len(header) - 1)  # what the remedy and note columns share
    notes = [_note(a) for a in outcome.attempts]
    if restore_run is not None:
        notes.append(f"run {restore_run}; {RESTORE_NOTE}")
    sets = [[str(c) for c in a.remedy] for a in outcome.attempts]
    # the remedy set first (what was tried), the note in what is left (at least 24: the failing op's start)
    longest_note = max((len(n) for n in notes), default=4)
    floor = 20 if spare >= 40 else max(12, spare // 2)  # a narrow terminal: both columns give way
    remedy_width = max(floor, min(max((len(", ".join(x)) for x in sets), default=6), spare - min(longest_note, floor)))
    note_width = max(floor, spare - remedy_width)
    texts = [remedy_text(names, remedy_width) or "(none)" for names in sets]
    seen: dict[str, tuple] = {}
    for i, (text, names) in enumerate(zip(texts, sets)):  # two different sets never read alike
        if seen.setdefault(text, tuple(names)) != tuple(names):
            texts[i] = ", ".join(names)
    used = max([len("remedy set")] + [len(t) for t in texts])  # what the grouped sets really take
    note_width = max(note_width, spare - min(used, remedy_width))
    rows = [[v[0], v[1], text, *v[2:], _cut(note, note_width)] for v, text, note in zip(values, texts, notes)]
    if restore_run is not None:
        rows.append(["", "restore", "(as the pipeline file says)", "", *([""] if both else []), "",
                     _cut(notes[-1], max(note_width, len(notes[-1])))])
    return table(rows, header)


def _note(attempt) -> str:
    note = attempt.result.note
    if attempt.result.resumed:
        note = "resumed" + (f"; {note}" if note else "")
    return note


def _cut(text: str, width: int) -> str:
    """A note in ``width``: "first failure" dropped first (the op and its mechanism say it), then cut in the
    middle (the run at the start and the mechanism at the end both stay)."""
    if len(text) > width:
        text = text.replace("first failure ", "")
    if len(text) <= width:
        return text
    head = max(1, (width - 1) * 2 // 5)
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def yaml_lines(stage_prefix: str, keep: list[str], fusion: dict[str, str], precision_file: str | None = None) -> str:
    """YAML that applies the remedy, nested under ``stage_prefix`` ('stages.convert.matrix.fp16');
    ``precision_file``: the op_precision_mode ini an impl-mode remedy wrote (the convert param is a path)."""
    if not keep and not fusion and not precision_file:
        return ""
    parts = stage_prefix.split(".")
    lines = [f"{'  ' * i}{part}:" for i, part in enumerate(parts)]
    indent = "  " * len(parts)
    if keep:
        lines.append(f"{indent}keep_dtype: [{', '.join(json.dumps(k) for k in keep)}]")
    if fusion:
        lines.append(f"{indent}fusion_switch: {{{', '.join(f'{json.dumps(r)}: {json.dumps(v)}' for r, v in fusion.items())}}}")
    if precision_file:
        lines.append(f"{indent}op_precision_mode: {json.dumps(str(precision_file))}")
    return "\n".join(lines) + "\n"


def named_matrix_yaml(base: str, matrix: dict, variant: str, keep: list[str], fusion: dict[str, str],
                      precision_file: str | None = None) -> str:
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
                            **({"fusion_switch": dict(fusion)} if fusion else {}),
                            **({"op_precision_mode": str(precision_file)} if precision_file else {})})
        named[name] = overlay
    body = yaml.safe_dump({"stages": {base: {"matrix": named}}}, sort_keys=False, default_flow_style=None, width=200)
    return f"# replaces stages.{base}.matrix (its list form, in named form: the same variants)\n" + body


def is_list_matrix(matrix) -> bool:
    return isinstance(matrix, dict) and bool(matrix) and all(isinstance(v, list) and v for v in matrix.values())


def overrides(stage_prefix: str, keep: list[str], fusion: dict[str, str], precision_file: str | None = None) -> list[str]:
    """``KEY=VALUE`` overrides (the engine's ``--set`` grammar) that apply a remedy."""
    items = []
    if keep:
        items.append(f"{stage_prefix}.keep_dtype={json.dumps(keep)}")
    if fusion:
        items.append(f"{stage_prefix}.fusion_switch={json.dumps(fusion)}")
    if precision_file:
        items.append(f"{stage_prefix}.op_precision_mode={json.dumps(str(precision_file))}")
    return items


def set_lines(stage_prefix: str, keep: list[str], fusion: dict[str, str], precision_file: str | None = None) -> list[str]:
    """The same overrides as shell arguments, ready to paste."""
    return [f"--set '{item}'" for item in overrides(stage_prefix, keep, fusion, precision_file)]


def summary(outcome: Outcome, keep: list[str], fusion: dict[str, str], **extra) -> dict:
    """The ``--json`` object: keep_dtype, fusion_switch, metric, attempts, plus the details."""
    final = outcome.final
    return {
        "keep_dtype": keep,
        "fusion_switch": fusion,
        "op_precision_mode": outcome.op_precision_mode,  # GE op type -> high_precision ({} when none)
        "metric": final.metric if final else None,
        "attempts": len(outcome.attempts),
        "passed": outcome.passed,
        "minimal": outcome.minimal,
        "output_cosine": final.output_cosine if final else None,
        "message": outcome.message,
        "by_range": [str(c) for c in outcome.by_range],
        "evaluated": outcome.evaluated,
        "interrupted": outcome.interrupted,
        **extra,
        "table": attempt_rows(outcome),
    }


def write_remedy_files(out_dir: Path, keep: list[str], fusion: dict[str, str], data: dict,
                       precision_text: str | None = None) -> dict[str, Path]:
    """keep_dtype.cfg, fusion_switch.cfg and op_precision_mode.ini (``precision_text``) in ATC's formats
    (only those in use) and fix.json."""
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
    impl_path = out_dir / IMPL_FILE
    if precision_text is None:
        impl_path.unlink(missing_ok=True)
    else:
        written["op_precision_mode"] = write_text_atomic(impl_path, precision_text)
    written["summary"] = write_text_atomic(out_dir / SUMMARY_FILE, json.dumps(data, indent=2, default=str) + "\n")
    return written


def terminal_text(outcome: Outcome, metric_name: str, keep: list[str], fusion: dict[str, str], stage_prefix: str,
                  written: dict[str, Path], target_text: str, restore_run: int | None = None,
                  yaml_text: str | None = None, precision_file: str | None = None) -> str:
    """``yaml_text``: the YAML to print instead of ``yaml_lines`` (a list-form matrix's named form);
    ``precision_file``: the op_precision_mode ini the answer converts with (an impl-mode remedy)."""
    out = [f"target: {target_text}", "", attempt_table(outcome, metric_name, restore_run), outcome.message]
    if outcome.passed and (keep or fusion or precision_file):
        out += ["", "apply it with these YAML lines:",
                (yaml_text or yaml_lines(stage_prefix, keep, fusion, precision_file)).rstrip(),
                "", "or on the command line:", *set_lines(stage_prefix, keep, fusion, precision_file)]
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


def journal_text(data: dict, outcome: Outcome) -> str:
    """Where the attempts are kept, and how to take the search up again (an interrupted or resumed run)."""
    out = []
    resumed = data.get("resumed") or 0
    if resumed:
        where = data.get("journal") or "the journal"
        out.append(f"resumed {resumed} attempt{'s' if resumed != 1 else ''} from {where}; "
                   f"{outcome.evaluated} evaluated now")
    if outcome.interrupted:
        where = data.get("journal")
        out.append(f"interrupted: the {len(outcome.attempts)} attempts done are kept"
                   + (f" in {where}" if where else "") + "; run the same command again to resume from them")
    return "".join(f"\n{line}" for line in out) + ("\n" if out else "")
