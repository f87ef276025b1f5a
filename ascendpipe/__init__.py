"""ascendpipe: reproducible model deployment to Huawei Ascend NPUs.

The public API lives in ``ascendpipe.api`` and is re-exported here lazily, so that importing the
package (as every CLI call does) costs nothing beyond the standard library.
"""

__version__ = "0.1.0"

_API = ("build", "status", "load", "validate", "runs", "show", "diff", "gc", "push", "pull")


def __getattr__(name):
    if name in _API:
        from ascendpipe import api

        return getattr(api, name)
    raise AttributeError(f"module 'ascendpipe' has no attribute '{name}'")


__all__ = list(_API)
