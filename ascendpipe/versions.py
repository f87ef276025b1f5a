"""Versions of installed distributions, cheap enough for every no-op build (a leaf module)."""

from __future__ import annotations


def package_version(dist: str) -> str:
    """A distribution's version without importing it (cheap enough for every no-op build).

    ``importlib.metadata`` costs ~60 ms to import; the version is in the ``.dist-info`` folder name,
    so look for that on ``sys.path`` first and fall back to metadata only when it is not found.
    """
    if dist in _version_cache:
        return _version_cache[dist]
    wanted = dist.lower().replace("-", "_").replace(".", "_")
    version = None
    for index in _dist_infos():
        version = index.get(wanted)
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
_indexes: list[dict[str, str]] = []


def _dist_infos() -> list[dict[str, str]]:
    """Per ``sys.path`` entry, in order: normalised distribution name -> version, from the
    ``.dist-info`` folder names. Each folder is listed once per process (a build asks for a dozen
    versions; listing site-packages again for each was most of a no-op build's deciding time)."""
    if not _indexes:
        import os
        import sys

        for entry in sys.path:
            try:
                names = os.listdir(entry or ".")
            except OSError:
                continue
            index: dict[str, str] = {}
            for name in names:
                if name.endswith(".dist-info"):
                    pkg, _, ver = name[: -len(".dist-info")].rpartition("-")
                    index.setdefault(pkg.lower().replace("-", "_").replace(".", "_"), ver)
            _indexes.append(index)
    return _indexes
