"""ATC's own fusion switch file drives both backends: atc gets the same file, unchanged."""

from __future__ import annotations

from ascendpipe.backends.ascend.atc import settings_argv

from ascendpipe.backends.ascend import stages

SWITCH = '{"Switch":{"GraphFusion":{},"UBFusion":{"TbeReduceElemwiseFusionPass":"off"}}}\n'


def test_dry_run_argv_names_the_users_fusion_switch_file(make_ctx, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    switch = tmp_path / "fusion_switch.cfg"
    switch.write_text(SWITCH)
    ctx = make_ctx("convert", "convert", {"soc_version": "Ascend310P3", "precision_mode": "force_fp16",
                                          "keep_dtype": ["/ReduceSum", "/Sqrt"], "fusion_switch_file": str(switch)},
                   inputs={"model": tmp_path / "m.onnx"})
    convert, _ = [a for a in stages.commands("convert", ctx) if not getattr(a, "note", None)]
    assert f"--fusion_switch_file={switch}" in convert
    assert switch.read_text() == SWITCH


def test_same_file_on_the_emulator_and_an_unknown_pass_only_errors_there(tmp_path):
    from ascendpipe.precision.settings import resolve

    switch = tmp_path / "fusion_switch.cfg"
    switch.write_text(SWITCH)
    settings = resolve({"fusion_switch_file": str(switch), "soc_version": "Ascend310P3"})
    assert settings.fusion_switch == {"TbeReduceElemwiseFusionPass": "off"}
    assert settings.remedy_files()["fusion_switch"] == SWITCH  # byte for byte
    assert f"--fusion_switch_file={switch}" in settings_argv(settings, "m.onnx", "model")
    assert settings.record()["overflow_mode"] == "saturation"  # Atlas inference products: saturation only
    # an inline entry that changes the file: the merged switches are written, each in its section
    merged = resolve({"fusion_switch_file": str(switch), "fusion_switch": {"ConvBatchnormFusionPass": "off"}})
    assert '"GraphFusion": {\n      "ConvBatchnormFusionPass": "off"' in merged.remedy_files()["fusion_switch"]
    assert not any(a.endswith(str(switch)) for a in settings_argv(merged, "m.onnx", "model"))
