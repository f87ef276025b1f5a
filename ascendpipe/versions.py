"""Versions of installed distributions, cheap enough for every no-op build (a leaf module)."""

from __future__ import annotations


def package_version(dist: str) -> str:
    """A distribution's version without importing it (cheap enough for every no-op build).

    ``importlib.metadata`` costs ~60 ms to import; the version is in the ``.dist-info`` folder name,
    so look for that on ``sys.path`` first and fall back to metadata only when it is not found.
    """
    if dist in _version_cache:
        return _version_cache[dist]
    import os
    import sys

    wanted = dist.lower().replace("-", "_")
    version = None
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                stem = name[: -len(".dist-info")]
                pkg, _, ver = stem.rpartition("-")
                if pkg.lower().replace("-", "_").replace(".", "_") == wanted.replace(".", "_"):
                    version = ver
                    break
        if version:
            break
    if version is None:
        from importlib import metadata

        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            version = "not installed"
    _version_cache[dist] = version
    return version


_version_cache: dict[str, str] = {}
