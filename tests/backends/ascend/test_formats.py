"""Parsers of the CANN formats, on fixtures in each documented layout and version variant."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ascendpipe.backends.ascend import acl_dump, aoe, ais_bench, atc, msit, msprof
from ascendpipe.errors import UserError

FIX = Path(__file__).parent / "fixtures"


# ---- AOE result: three layouts -------------------------------------------------------------------

def test_aoe_900_layout_reads_every_op_and_computes_missing_improvement():
    data = aoe.parse_result(json.loads((FIX / "aoe/aoe_result_opat_20240101120000_123.json").read_text()))
    assert data["variant"] == "900"
    assert data["tuning_name"] == "resnet50" and data["tuning_time_s"] == 26
    soft, conv = data["ops"]
    assert (soft["op_name"], soft["op_type"], soft["before_us"], soft["after_us"]) == ("softmax", "SoftmaxV2", 134, 99)
    assert soft["improvement_pct"] == 35.35 and soft["update_mode"] == "add"
    # no performance_improvement given: AOE's own convention, (before - after) / after, 60 -> 50 is 20%
    assert conv["improvement_pct"] == pytest.approx((60 - 50) / 50 * 100)
    assert round((134 - 99) / 99 * 100, 2) == soft["improvement_pct"]  # the documented example fits that convention
    assert conv["update_mode"] == "update"


def test_aoe_63rc2_top_level_list_with_model_numbers():
    data = aoe.parse_result(json.loads((FIX / "aoe/aoe_result_opat_63rc2.json").read_text()))
    assert data["variant"] == "63RC2"
    assert data["model"] == {"baseline_ms": 12.5, "result_ms": 10.0, "improvement_pct": 25.0}
    assert [(o["op_name"], o["before_us"], o["after_us"]) for o in data["ops"]] == [("Conv_0", 300.0, 200.0)]


def test_aoe_62rc1_add_repo_operators():
    data = aoe.parse_result(json.loads((FIX / "aoe/aoe_result_opat_62rc1.json").read_text()))
    assert data["variant"] == "62RC1"
    assert [o["op_name"] for o in data["ops"]] == ["MatMul_12", "MatMul_13"]
    assert data["ops"][0]["improvement_pct"] == 60.0 and data["ops"][0]["update_mode"] == "add"
    assert data["ops"][1]["improvement_pct"] == pytest.approx(20.0)  # 30 -> 25 us


def test_aoe_log_lines_and_not_a_result():
    log = "SGAT process finished. Performance improved by 5.5%\nOPAT process finished. Performance improved by 20%\n" \
          "[Aoe]Aoe process finished,cost time 1109s."
    assert aoe.parse_log(log) == {"improvements_pct": [5.5, 20.0], "cost_s": 1109.0}
    with pytest.raises(ValueError):
        aoe.parse_result({"something": 1})


# ---- ais_bench summary ---------------------------------------------------------------------------

def test_ais_bench_summary_into_emulator_shape():
    raw = json.loads((FIX / "ais_bench/2023_05_06-07_08_09_summary.json").read_text())
    data = ais_bench.parse_summary(raw)
    assert data["latency_ms"] == {"min": 2.1, "max": 2.9, "mean": 2.45, "median": 2.4, "p99": 2.884}
    assert data["throughput"] == pytest.approx(1000 * 8 / 2.45, rel=1e-4)  # ais_bench's formula, batch 8
    assert data["count"] == 4 and data["h2d_latency_ms"]["mean"] == 0.4
    assert data["raw"]["pid"] == 4242
    assert ais_bench.find_summary(FIX / "ais_bench").name == "2023_05_06-07_08_09_summary.json"


def test_ais_bench_argv_uses_separate_tokens():
    argv = ais_bench.infer_argv("python3", model=Path("m.om"), inputs=[Path("a"), Path("b")], output=Path("o"),
                                loop=3, warmup_count=0, acl_json_path=Path("acl.json"))
    assert argv == ["python3", "-m", "ais_bench", "--model", "m.om", "--input", "a,b", "--output", "o",
                    "--outfmt", "NPY", "--loop", "3", "--warmup_count", "0", "--acl_json_path", "acl.json"]


# ---- msprof CSVs: both layouts and column variants -----------------------------------------------

def test_msprof_new_layout_block_num_and_model_name():
    (prof,) = msprof.find_prof_dirs(FIX / "msprof/new")
    data = msprof.read_prof_dir(prof)
    conv, relu, reshape = data["op_summary"]
    assert conv["Op Name"] == "Conv_0" and conv["OP Type"] == "Conv2D" and conv["Model Name"] == "resnet50"
    assert conv["Block Num"] == 8 and conv["Task Duration(us)"] == 120.5 and conv["aic_total_cycles"] == 240000
    assert conv["Input Shapes"] == "8,3,224,224;64,3,7,7"
    assert relu["aic_mac_time(us)"] is None  # N/A
    assert reshape["Block Num"] is None and reshape["Input Shapes"] == "; ; ; ;"
    assert data["summary"]["total_task_duration_us"] == pytest.approx(120.5 + 10.25 + 3.0)
    assert [r["Ratio(%)"] for r in data["op_statistic"]] == [90.06, 7.66, 2.24]


def test_msprof_old_layout_block_dim_renamed_and_no_model_name():
    (prof,) = msprof.find_prof_dirs(FIX / "msprof/old")
    data = msprof.read_prof_dir(prof)
    first = data["op_summary"][0]
    assert first["Block Num"] == 2 and first["Mix Block Num"] == 0 and "Block Dim" not in first
    assert first["aic_total_cycles"] == 98000 and "Model Name" not in first
    assert [r["OP Type"] for r in data["op_statistic"]] == ["Conv2D", "MatMulV2"]
    assert data["summary"]["total_task_duration_us"] == pytest.approx(60.0)


def test_msprof_task_time_l0_na_cells():
    (prof,) = msprof.find_prof_dirs(FIX / "msprof/l0")
    data = msprof.read_prof_dir(prof)
    add, mul = data["op_summary"]
    assert add["Task Duration(us)"] == 2.5 and add["OP State"] is None
    assert mul["OP Type"] is None and mul["Task Duration(us)"] is None
    assert data["summary"] == {"ops": 2, "ops_without_duration": 1, "total_task_duration_us": 2.5, "op_types": 0,
                               "source": "op_summary"}


def test_msprof_argv_both_forms():
    app = ["python3", "-m", "ais_bench", "--model", "/a b/m.om"]
    basic = msprof.collect_argv("msprof", Path("/o"), app, switches=["--task-time=on"])
    assert basic == ["msprof", "--output=/o", "--task-time=on", "--application=python3 -m ais_bench --model '/a b/m.om'"]
    newer = msprof.collect_argv("msprof", Path("/o"), app, form="positional", switches=[])
    assert newer == ["msprof", "--output=/o", *app]


# ---- msit compare CSV ----------------------------------------------------------------------------

def test_msit_new_csv_duplicates_nan_std_pairs_and_flags():
    data = msit.read_result_csv(FIX / "msit/result_20240101120000.csv")
    assert data["columns"][5:9] == ["Address", "GroundTruth", "DataType.1", "Address.1"]
    conv, add, trans, out = data["rows"]
    assert conv["golden_ops"] == ["Conv_0", "Relu_1"] and conv["fused"] and conv["golden_dtype"] == "float32"
    assert conv["cosine"] == 0.999912 and (conv["target_mean"], conv["target_std"]) == (0.512, 1.204)
    assert add["overflow"] == "target" and add["failed"] and add["max_abs_error"] == 65504.0
    assert add["target_mean"] == math.inf and math.isnan(add["target_std"])
    assert trans["side"] == "target_only" and trans["cosine"] is None and trans["is_npu_op"] is True
    assert out["is_output"] and out["op_name"] == "Node_Output"
    s = data["summary"]
    assert s["failed_ops"] == 2 and s["first_failure_index"] == 1 and s["min_cosine"] == 0.912
    assert s["output_cosine"] == 0.98 and s["overflow_ops"] == 1 and s["target_only"] == 1


def test_msit_old_csv_without_optional_columns():
    data = msit.read_result_csv(FIX / "msit/result_old.csv")
    (row,) = data["rows"]
    assert row["golden_ops"] == ["Sub_26", "Mul_28"] and row["shape"] == [1, 3, 4]
    assert (row["target_mean"], row["target_std"], row["golden_mean"], row["golden_std"]) == (0.25, 1.5, 0.26, 1.49)
    assert row["overflow"] is None and row["failed"] is False and row["is_npu_op"] is None


def test_msit_compare_argv():
    argv = msit.compare_argv("msit", golden_model=Path("g.onnx"), om_model=Path("m.om"), output=Path("o"),
                             inputs=[Path("a.npy")], input_shape="x:1,3,8,8", advisor=True)
    assert argv == ["msit", "debug", "compare", "-gm", "g.onnx", "-om", "m.om", "-o", "o", "-i", "a.npy",
                    "-is", "x:1,3,8,8", "--advisor"]


# ---- ATC: argv and mode=1 JSON -------------------------------------------------------------------

def test_om_json_mapping_cmdline_and_passes():
    info = atc.load_om_json(FIX / "om/resnet_mode1.json")
    assert info.name == "resnet_fused"
    assert info.atc_cmdline.startswith("atc --framework=5 --model=resnet.onnx")
    assert info.attrs["soc_version"] == "Ascend310P3" and info.attrs["opp_version"] == "7.0.0.alpha003"
    mapping = info.mapping()
    assert mapping["Conv_0"] == ["Conv_0", "Relu_1"] and mapping["Sub_26Mul_28"] == ["Sub_26", "Mul_28"]
    assert mapping["trans_TransData_3"] == ["trans_TransData_3"]  # no attr: maps to itself
    passes = {op.name: op.pass_names for op in info.ops}
    assert passes["Conv_0"] == ["ConvReluFusionPass"] and passes["Sub_26Mul_28"] == ["TbeEltwiseFusionPass"]


def test_om_json_agrees_with_the_compare_mapping():
    from ascendpipe.compare.mapping import om_original_op_names

    raw = json.loads((FIX / "om/resnet_mode1.json").read_text())
    assert atc.parse_om_json(raw).mapping() == om_original_op_names(raw)


def _settings(**kw):
    base = dict(model=Path("m.onnx"), output=Path("out/model"), soc_version="Ascend310P3")
    return atc.AtcSettings(**{**base, **kw})


def test_atc_argv_full():
    s = _settings(input_shape={"x": [1, 3, 224, 224], "y": [1, 4]}, input_format="NCHW",
                  precision_mode="allow_mix_precision", keep_dtype=Path("k.cfg"), fusion_switch_file=Path("f.cfg"),
                  modify_mixlist=Path("m.json"), op_select_implmode="high_precision",
                  optypelist_for_implmode=["Pooling", "SoftmaxV2"], buffer_optimize="off_optimize",
                  out_nodes=["conv:0", "fc:1"], log="info")
    assert atc.convert_argv("atc", s) == [
        "atc", "--framework=5", "--model=m.onnx", "--soc_version=Ascend310P3", "--input_shape=x:1,3,224,224;y:1,4",
        "--input_format=NCHW", "--precision_mode=allow_mix_precision", "--keep_dtype=k.cfg",
        "--fusion_switch_file=f.cfg", "--modify_mixlist=m.json", "--op_select_implmode=high_precision",
        "--optypelist_for_implmode=Pooling,SoftmaxV2", "--out_nodes=conv:0;fc:1", "--output=out/model",
        "--buffer_optimize=off_optimize", "--log=info"]
    assert atc.json_argv("atc", Path("a.om"), Path("a.json")) == ["atc", "--mode=1", "--om=a.om", "--json=a.json"]


@pytest.mark.parametrize("kw, field", [
    ({"soc_version": ""}, "soc_version"),
    ({"precision_mode": "force_fp16", "precision_mode_v2": "fp16"}, "precision_mode_v2"),
    ({"precision_mode": "fp8"}, "precision_mode"),
    ({"input_format": "NHWC"}, "input_format"),
    ({"modify_mixlist": Path("m.json"), "precision_mode": "force_fp16"}, "modify_mixlist"),
    ({"optypelist_for_implmode": "Pooling"}, "optypelist_for_implmode"),
    ({"buffer_optimize": "l3"}, "buffer_optimize"),
    ({"log": "verbose"}, "log"),
])
def test_atc_argv_rejects_documented_conflicts(kw, field):
    with pytest.raises(UserError) as err:
        atc.convert_argv("atc", _settings(**kw))
    assert err.value.location.field == field


def test_onnx_with_aipp_refuses_nhwc_and_aoe_buffer_optimize_only_on_job2():
    # ATC takes NCHW/NCDHW/ND for an ONNX model (graphengine ge/offline/main.cc:620-660, E10001), AIPP or not
    with pytest.raises(UserError) as err:
        atc.convert_argv("atc", _settings(insert_op_conf=Path("aipp.cfg"), input_format="NHWC"))
    assert err.value.location.field == "input_format" and "NHWC" in str(err.value)
    s = _settings(insert_op_conf=Path("aipp.cfg"), input_format="NCHW", buffer_optimize="off_optimize")
    assert "--input_format=NCHW" in atc.convert_argv("atc", s)
    assert not any(a.startswith("--buffer_optimize") for a in aoe.tune_argv("aoe", s, 1))
    job2 = aoe.tune_argv("aoe", s, 2)
    assert "--job_type=2" in job2 and "--buffer_optimize=off_optimize" in job2


def test_input_shape_grammar():
    assert atc.parse_input_shape("a:1,3,224,224;b:1") == {"a": [1, 3, 224, 224], "b": [1]}
    assert atc.parse_input_shape("ns/x:0:1,2") == {"ns/x:0": [1, 2]}
    with pytest.raises(UserError):
        atc.parse_input_shape("a=1,2")


# ---- acl dump ------------------------------------------------------------------------------------

def test_acl_config_documented_keys():
    cfg = acl_dump.acl_config("resnet50", Path("/abs/out"), layers=["conv1", "pool1"])
    assert cfg == {"dump": {"dump_list": [{"model_name": "resnet50", "layer": ["conv1", "pool1"]}],
                            "dump_path": "/abs/out", "dump_mode": "output", "dump_op_switch": "off",
                            "dump_data": "tensor"}}
    single = acl_dump.acl_config("m", Path("/o"), op_switch="on", mode="all")["dump"]
    assert single["dump_list"] == [] and single["dump_mode"] == "all"


@pytest.mark.parametrize("name, expected", [
    ("Conv2D.Conv_0.3.2.1682067845380164", ("Conv2D", "Conv_0", 1682067845380164, ["3", "2"])),
    ("Add.Add_8.5.1682067845380164", ("Add", "Add_8", 1682067845380164, ["5"])),
    ("MatMulV2.fc_1.2.15.1700000000000123.AI_CORE.0.1.0", ("MatMulV2", "fc_1", 1700000000000123, ["2", "15"])),
])
def test_dump_file_names(name, expected):
    parsed = acl_dump.parse_dump_name(name)
    assert (parsed.op_type, parsed.op_name, parsed.timestamp, parsed.ids) == expected


def test_dump_names_sanitised_and_converted_names():
    assert acl_dump.sanitize("layer1/conv.0 a\\b") == "layer1_conv_0_a_b"
    assert acl_dump.parse_dump_name("golden.npy") is None
    assert acl_dump.parse_converted_name("Conv2D.Conv_0.3.2.1682067845380164.output.0.1x3x224x224.npy") == {
        "original": "Conv2D.Conv_0.3.2.1682067845380164", "io": "output", "index": 0, "shape": [1, 3, 224, 224]}


def test_dump_tree_finder_takes_newest_run(tmp_path):
    for run in ("20240101000000", "20240102000000"):
        (tmp_path / run / "0" / "model" / "1" / "0").mkdir(parents=True)
    (tmp_path / "20240102000000" / "0" / "model" / "1" / "1").mkdir()
    leaves = acl_dump.find_dump_dirs(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in leaves] == ["20240102000000/0/model/1/0",
                                                                    "20240102000000/0/model/1/1"]
