"""Kept so tests written against it keep working: the models live in tests/modelzoo.py."""

from tests.modelzoo import constant_heavy, conv_chain

__all__ = ["conv_chain", "constant_heavy"]
