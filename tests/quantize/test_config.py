"""AMCT's simple config format (parse, write, errors with lines) and the params -> settings rules."""

from __future__ import annotations

import pytest

from ascendpipe.errors import UserError
from ascendpipe.quantize.config import format_simple_config, parse_simple_config, resolve

AMCT_EXAMPLE = """\
# global quantize parameter
batch_num : 2
activation_offset : true
joint_quant : false
skip_layers : "conv_1"
skip_layer_types:"Gemm"
do_fusion: true
skip_fusion_layers : "conv_1"
common_config : {
    arq_quantize : {
        channel_wise : true
    }
    ifmr_quantize : {
        search_range_start : 0.7
        search_range_end : 1.3
        search_step : 0.01
        max_percentile : 0.999999
        min_percentile : 0.999999
    }
}

override_layer_types : {
    layer_type : "MatMul"
    calibration_config : {
        arq_quantize : {
            channel_wise : false
        }
    }
}
override_layer_configs : {
    layer_name : "conv_2"
    calibration_config : { arq_quantize : { channel_wise : false } }
}
"""


def test_parses_the_documented_example():
    config = parse_simple_config(AMCT_EXAMPLE)
    assert config["batch_num"] == 2 and config["activation_offset"] is True and config["joint_quant"] is False
    assert config["skip_layers"] == ["conv_1"] and config["skip_layer_types"] == ["Gemm"]
    assert config["common_config"]["ifmr_quantize"]["search_range_end"] == 1.3
    assert config["override_layer_types"][0]["layer_type"] == "MatMul"
    assert config["override_layer_configs"][0]["calibration_config"]["arq_quantize"]["channel_wise"] is False


def test_format_round_trips():
    config = parse_simple_config(AMCT_EXAMPLE)
    text = format_simple_config(config, header="written by a test")
    assert text.startswith("# written by a test\nbatch_num : 2\n")
    assert 'skip_layers : "conv_1"' in text
    assert parse_simple_config(text) == config


@pytest.mark.parametrize("text, line, words", [
    ("batch_num : 2\nbatchnum : 3\n", 2, "unknown field 'batchnum'"),
    ('batch_num : 2\nskip_layers : conv1\n', 2, "quoted string"),
    ("activation_offset : maybe\n", 1, "takes a bool"),
    ("common_config : {\n  arq_quantize : { channel_wise : true }\n", None, "never closed"),
    ("batch_num : 1\nbatch_num : 2\n", 2, "given twice"),
])
def test_errors_name_the_line(text, line, words):
    with pytest.raises(UserError) as err:
        parse_simple_config(text, source="quant.cfg")
    assert words in str(err.value)
    assert err.value.location.file == "quant.cfg" and err.value.location.line == line


def test_params_override_the_file_and_skip_lists_join():
    s = resolve({"calibration_config": "q.cfg", "batch_num": 4, "skip_layers": ["conv_9"], "activation_offset": False},
                read_text=lambda _: AMCT_EXAMPLE)
    assert s.batch_num == 4 and s.activation_offset is False
    assert s.skip_layers == ["conv_1", "conv_9"]
    assert s.ifmr["search_step"] == 0.01 and s.extra == {"joint_quant": False, "do_fusion": True,
                                                          "skip_fusion_layers": ["conv_1"]}
    # AMCT's precedence: layer override > type override > common_config
    assert s.layer_channel_wise("conv_2", "Conv") is False
    assert s.layer_channel_wise("mm", "MatMul") is False
    assert s.layer_channel_wise("conv_3", "Conv") is True


def test_settings_write_back_as_amct_config():
    s = resolve({"config": {"skip_layers": ["a"], "common_config": {"arq_quantize": {"channel_wise": False}}},
                 "batch_num": 2})
    text = format_simple_config(s.amct_config())
    assert parse_simple_config(text) == {"batch_num": 2, "activation_offset": True, "skip_layers": ["a"],
                                         "common_config": {"arq_quantize": {"channel_wise": False}}}


def test_bad_params_are_user_errors():
    with pytest.raises(UserError, match="unknown field 'skip_layer'"):
        resolve({"config": {"skip_layer": ["a"]}})
    with pytest.raises(UserError, match="calibrate_method 'kl'"):
        resolve({"calibrate_method": "kl"})
