"""ascendpipe: reproducible model deployment to Huawei Ascend NPUs.

The public API lives in ``ascendpipe.api`` and is re-exported here lazily, so that importing the
package (as every CLI call does) costs nothing beyond the standard library.
"""

import os as _os

__version__ = "0.1.0"

# Hermetic by default: onnxruntime's telemetry writes a device id and a database under
# ~/.cache/Microsoft/DeveloperTools/.onnxruntime/ and leaves $TMPDIR/.ses; the variable, set before
# onnxruntime loads (here, before any of our modules can import it) and inherited by stage commands
# and workers, stops both. A user who sets it to 0 keeps telemetry (README, "Telemetry").
_os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

_API = ("build", "status", "load", "validate", "runs", "show", "diff", "gc", "push", "pull")


def __getattr__(name):
    if name in _API:
        from ascendpipe import api

        return getattr(api, name)
    raise AttributeError(f"module 'ascendpipe' has no attribute '{name}'")


__all__ = list(_API)
