"""The ``PROF_*`` folder msprof exports, written by the emulation's profile so that ``ascendpipe import``
and msprof-analyze read it as they read the device's (pure names + one writer).

Names as msprof-analyze looks them up (package ``msprof-analyze`` 26.2.0,
``msprof_analyze/advisor/config/profiling_data_version_config.yaml:4-13``): a directory matching
``^PROF_\\d{6}_\\d{17}_\\w+$`` holding ``mindstudio_profiler_output/`` with ``op_summary_\\d{14}.csv``
(``advisor/common/profiling/op_summary.py:85-87`` accepts ``^op_summary_[_\\d]+\\.csv$``); msprof names
``op_statistic_<same 14 digits>.csv`` beside it. The 14 digits are the export time (YYYYMMDDhhmmss);
the 17 of the folder add milliseconds; the folder's last part, random letters on the device, is
``ASCENDPIPE`` here.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

PROF_DIR = re.compile(r"^PROF_\d{6}_\d{17}_\w+$")
OP_SUMMARY = re.compile(r"^op_summary_\d{14}\.csv$")
OP_STATISTIC = re.compile(r"^op_statistic_\d{14}\.csv$")
OUTPUT_DIR = "mindstudio_profiler_output"


def names(when: datetime) -> tuple[str, str, str]:
    """(PROF folder, op_summary file, op_statistic file) for an export at ``when``."""
    stamp = when.strftime("%Y%m%d%H%M%S")
    return (f"PROF_000001_{stamp}{when.microsecond // 1000:03d}_ASCENDPIPE", f"op_summary_{stamp}.csv",
            f"op_statistic_{stamp}.csv")


def write_prof_folder(out_dir: Path, op_summary_csv: str, op_statistic_csv: str,
                      when: datetime | None = None) -> Path:
    """``out_dir/PROF_.../mindstudio_profiler_output/{op_summary,op_statistic}_<stamp>.csv``; returns the PROF dir."""
    from ascendpipe.fsutil import write_text_atomic

    folder, summary_name, statistic_name = names(when or datetime.now(timezone.utc))
    output = Path(out_dir) / folder / OUTPUT_DIR
    write_text_atomic(output / summary_name, op_summary_csv)
    write_text_atomic(output / statistic_name, op_statistic_csv)
    return Path(out_dir) / folder
