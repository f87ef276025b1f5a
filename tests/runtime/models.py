"""Kept so tests written against it keep working: the models live in tests/modelzoo.py."""

from tests.modelzoo import conv2d_reference, conv_model, emulated_model, linear_model, linear_reference, two_input_model

__all__ = ["linear_model", "linear_reference", "conv_model", "conv2d_reference", "emulated_model", "two_input_model"]
