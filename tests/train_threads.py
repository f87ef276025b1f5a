"""The example trainings' thread count in tests: ``ASCENDPIPE_TEST_THREADS`` (unset: the pipelines' own
``params.threads``, 1).

The example and quantize tests assert stories of trained models, and a training's weights depend on its
thread count (another split of each float reduction) as they depend on the CPU. `.ci/run` runs those
tests a second time with ``ASCENDPIPE_TEST_THREADS=2``, so a bound that holds for one thread count only
turns CI red (issue 50: a test green on one machine and red on another blocks every landing).
"""

from __future__ import annotations

import os


def train_threads() -> list[str]:
    """``--set`` lines that give the example trainings the thread count asked for, if any."""
    value = os.environ.get("ASCENDPIPE_TEST_THREADS", "").strip()
    if not value:
        return []
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"ASCENDPIPE_TEST_THREADS must be a positive integer, given {value!r}")
    return [f"params.threads={int(value)}"]
