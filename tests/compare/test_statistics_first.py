"""Issue 49 item 9: past the dumps' disk budget a compare goes statistics first (msprobe's statistics
level: max, min, mean, L2 norm, inf/NaN counts), dumps in full only around the first failure, and says
which rows are statistics only: never a cosine for them."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from ascendpipe.compare import statistics
from ascendpipe.compare import thresholds as thr
from ascendpipe.errors import UserError
from tests.fix import transformer_models as tm

SOC = "Ascend310B1"


def _entry(array: np.ndarray, dtype: str | None = None) -> dict:
    from ascendpipe.backends.onnxruntime.dump_write import summary_stats

    return {"name": "t", "shape": list(array.shape), "dtype": dtype or str(array.dtype), "statistics": True,
            **summary_stats(array)}


@pytest.mark.parametrize("seed", range(6))
def test_what_statistics_fail_the_full_tensors_fail_too(seed):
    """The bounds are lower bounds: over seeded pairs (scaled, shifted, noisy, one element off), the
    relative Euclidean distance and max abs error the statistics give never exceed the true ones."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal(4096).astype(np.float32) * rng.uniform(0.1, 100)
    t = (g * rng.uniform(0.8, 1.2) + rng.normal(0, 0.05, g.size) * np.abs(g).mean()).astype(np.float32)
    t[rng.integers(0, g.size)] += rng.uniform(-5, 5) * np.abs(g).max()
    facts = statistics.pair(_entry(g), _entry(t), thr.resolve())
    g64, t64 = g.astype(np.float64), t.astype(np.float64)
    red = np.linalg.norm(t64 - g64) / np.linalg.norm(g64)
    assert facts["bounds"]["relative_euclidean"] <= red * (1 + 1e-9)
    assert facts["bounds"]["max_abs_error"] <= np.abs(t64 - g64).max() * (1 + 1e-9)
    if facts["reasons"]:
        assert red > thr.resolve()["relative_euclidean"]


def test_statistics_of_a_tensor_with_inf_prove_no_distance_but_an_overflow():
    g = np.linspace(-1, 1, 64, dtype=np.float32)
    t = g.astype(np.float16)
    t[3] = np.inf
    facts = statistics.pair(_entry(g), _entry(t), thr.resolve())
    assert facts["overflow"] == "target" and facts["bounds"]["relative_euclidean"] is None
    assert facts["reasons"][0].startswith("target overflows fp16: it holds 1 more inf/NaN")


def test_a_statistics_dump_writes_no_tensor_but_the_inputs(tmp_path):
    from ascendpipe.backends.onnxruntime.dump import dump_model

    model = tm.build("llama", tmp_path / "llama.onnx")
    feeds = tm.inputs("llama", past=8)
    index = json.loads(dump_model(model, feeds, tmp_path / "stats", fusions=False, full=set()).read_text())
    files = {e["file"] for e in index["tensors"] if "file" in e}
    assert files == {e["file"] for e in index["tensors"] if e["op_type"] == "Input"}
    assert len(list((tmp_path / "stats" / "tensors").iterdir())) == len(feeds)
    full = json.loads(dump_model(model, feeds, tmp_path / "full", fusions=False).read_text())
    by_name = {e["name"]: e for e in index["tensors"]}
    for entry in full["tensors"]:
        if entry["op_type"] == "Input":
            continue
        summary = by_name[entry["name"]]
        array = np.load(tmp_path / "full" / entry["file"]).astype(np.float64)
        assert summary["statistics"] is True and summary["shape"] == entry["shape"]
        assert summary["dtype"] == entry["dtype"] and (summary["min"], summary["max"]) == (entry["min"], entry["max"])
        if array.size and np.isfinite(array).all():
            assert summary["mean"] == pytest.approx(array.mean(), rel=1e-9, abs=1e-12)
            assert summary["norm"] == pytest.approx(np.linalg.norm(array.ravel()), rel=1e-9, abs=1e-12)


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """A decoder whose RMSNorms overflow inside their fused kernel (saturation SoC)."""
    from ascendpipe.backends.onnxruntime.convert import convert_model
    from ascendpipe.precision.settings import resolve

    root = tmp_path_factory.mktemp("decoder")
    model = tm.build("llama", root / "llama.onnx", scaled=True)
    np.savez(root / "in.npz", **tm.inputs("llama", past=8))
    converted = convert_model(model, root / "conv", resolve({"soc_version": SOC})).model_path
    return root, model, converted.parent


def _compare(decoder, work, budget):
    from ascendpipe.backends.compare_sources import run_compare

    root, model, target = decoder
    return run_compare(model, target, input_path=root / "in.npz", work_dir=work, limits=thr.resolve(),
                       dump_budget=budget)[0]


def test_past_the_budget_the_first_failure_is_found_from_statistics_and_compared_in_full(decoder, tmp_path):
    from ascendpipe.compare.writers import contract, csv_text, terminal_text

    full = _compare(decoder, tmp_path / "full", None)
    budgeted = _compare(decoder, tmp_path / "budget", 20 << 10)
    record = budgeted["summary"]["statistics_first"]
    assert record["in_full"] == "window" and record["full_bytes"] > record["budget_bytes"] == 20 << 10
    assert record["window"]["bytes"] <= record["budget_bytes"]
    a, b = full["first_failure"], budgeted["first_failure"]
    assert (a["op_name"], a["mechanism"], a["reason"]) == (b["op_name"], b["mechanism"], b["reason"])
    assert full["verdict"].split(";")[0] == budgeted["verdict"].split(";")[0]
    summarised = [r for r in budgeted["rows"] if r.get("stats_only")]
    assert summarised and budgeted["summary"]["statistics_only"] == len(summarised)
    assert "compared by statistics only, not in full" in budgeted["verdict"]
    for row in summarised:  # never a number that looks computed from full tensors
        assert row["exact_cosine"] is None and row["decision"] is None and row["cosine"] is None
        assert row["note"].endswith("not compared in full (statistics only)")
    in_window = {r["index"] for r in budgeted["rows"] if r["side"] == "both" and not r.get("stats_only")}
    assert b["index"] in in_window and set(record["window"]["rows"]) == in_window
    text = terminal_text(budgeted, worst=200)
    assert "tensors compared by statistics only" in text
    line = next(x for x in text.splitlines() if x.strip().startswith(f"{summarised[0]['index']} "))
    assert line.split()[3:6] == ["n/a", "n/a", "n/a"]
    cells = [r for r in csv.DictReader(io.StringIO(csv_text(budgeted))) if r["NPUDump"] == summarised[0]["op_name"]]
    assert cells[0]["CosineSimilarity"] == "NaN" and "statistics only" in cells[0]["CompareFailReason"]
    assert all(r["cosine"] is None for r in contract(budgeted)["rows"] if r.get("stats_only"))
    written = sum(p.stat().st_size for p in (tmp_path / "budget" / "target_dump" / "tensors").iterdir())
    whole = sum(p.stat().st_size for p in (tmp_path / "full" / "target_dump" / "tensors").iterdir())
    assert written < whole


def test_a_budget_the_full_dumps_fit_compares_everything_in_full(decoder, tmp_path):
    full = _compare(decoder, tmp_path / "full", None)
    # under the generous bound (so the statistics pass runs), above the dumps' exact size
    fitting = _compare(decoder, tmp_path / "fit", 1 << 20)
    record = fitting["summary"]["statistics_first"]
    assert record["in_full"] == "all" and record["full_bytes"] <= 1 << 20 < record["estimated_bytes"]
    assert fitting["summary"]["statistics_only"] == 0
    assert [r["cosine"] for r in fitting["rows"]] == [r["cosine"] for r in full["rows"]]
    assert "statistics_first" not in full["summary"]


@pytest.mark.parametrize("text, expected", [("2G", 2 << 30), ("500M", 500 << 20), ("1.5GB", int(1.5 * (1 << 30))),
                                            ("none", None), ("auto", "auto"), (1024, 1024)])
def test_budget_sizes(text, expected):
    from ascendpipe.backends.dump_budget import parse_budget

    assert parse_budget(text) == expected


def test_a_bad_budget_is_one_located_line():
    from ascendpipe.backends.dump_budget import parse_budget
    from ascendpipe.errors import Location

    with pytest.raises(UserError) as err:
        parse_budget("12Q", Location(field="--dump-budget"))
    assert str(err.value).startswith("--dump-budget '12Q' is not a size: give bytes") and "\n" not in str(err.value)


def test_the_cli_takes_a_budget_and_refuses_a_bad_one_before_any_dump(decoder, tmp_path, capsys):
    from ascendpipe.cli.main import main

    root, model, target = decoder
    args = ["compare", "--golden", str(model), "--target", str(target), "--input", str(root / "in.npz"), "--json"]
    assert main([*args, "--dump-budget", "12Q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ascendpipe: error: --dump-budget '12Q' is not a size: give bytes (500M, 2G, 1.5GB), auto or none"]
    assert main([*args, "--dump-budget", "20K"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["statistics_first"]["in_full"] == "window" and doc["summary"]["statistics_only"] > 0
    assert doc["first_failure"]["op_name"] == "/ln1/ReduceMean"
