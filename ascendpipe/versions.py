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


# --- the mixed-precision lists a convert reads (precision/lists.py, precision/opsinfo.py) -----------------
# Here, not in precision/, because every no-op build keys its converts on them: a few stats, no import.

# the published lists' version (tools/extract_op_lists.py; tests/precision/test_op_lists.py holds it to
# precision/data/op_lists.json's META): new extracted lists rebuild every convert
OP_LISTS_BUILTIN = "canndev-2022@7290acc77320+opdefs-2026@e5c3fa93/c4193324"
OPS_INFO_REL = "built-in/op_impl/ai_core/tbe/config"
# CANN 8's and CANN 9's default install folders (doctor.py's SET_ENV_SCRIPTS)
OPS_INFO_HOMES = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann")


def opp_candidates(env) -> list[str]:
    """The opp folders a CANN install's ops-info may be under, in order: ``$ASCEND_OPP_PATH``, else
    ``$ASCEND_HOME_PATH/opp`` (GE ``configuration.cc`` L624-637), then ``$ASCEND_TOOLKIT_HOME/opp`` and the
    default install folders."""
    import os

    found = [env["ASCEND_OPP_PATH"]] if env.get("ASCEND_OPP_PATH") else []
    found += [os.path.join(env[var], "opp") for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME") if env.get(var)]
    return found + [os.path.join(home, "opp") for home in OPS_INFO_HOMES]


def ops_info_root(env) -> str | None:
    """``<opp>/built-in/op_impl/ai_core/tbe/config`` of the first opp folder that has one."""
    import os

    for opp in opp_candidates(env):
        root = os.path.join(opp, OPS_INFO_REL)
        if os.path.isdir(root):
            return root
    return None


def ops_info_files(root: str) -> list[tuple[str, str]]:
    """(soc folder, path) of every ``*.json`` under each SoC folder of ``root``, sorted."""
    import os

    found = []
    try:
        folders = sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)))
    except OSError:
        return []
    for folder in folders:
        try:
            names = sorted(n for n in os.listdir(os.path.join(root, folder)) if n.endswith(".json"))
        except OSError:
            continue
        found += [(folder, os.path.join(root, folder, n)) for n in names if not n.startswith(".")]
    return found


def op_lists_key(env=None) -> str:
    """The lists' part of a convert's key: an install's ops-info files by name, size and time (a few stats,
    no reading), else the published data's version. A new or changed install rebuilds every convert."""
    import hashlib
    import os

    root = ops_info_root(os.environ if env is None else env)
    if root is None:
        return f"builtin {OP_LISTS_BUILTIN}"
    rows = []
    for folder, path in ops_info_files(root):
        try:
            st = os.stat(path)
            rows.append(f"{folder}/{os.path.basename(path)} {st.st_size} {st.st_mtime_ns}")
        except OSError:
            rows.append(f"{folder}/{os.path.basename(path)} gone")
    return f"install {root}:" + hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]


def ops_info_watched(env=None) -> list[str]:
    """The folders and files whose stats tell that an install's lists changed (the no-op memo stats them)."""
    import os

    env = os.environ if env is None else env
    root = ops_info_root(env)
    if root is None:
        return [os.path.join(opp, OPS_INFO_REL) for opp in opp_candidates(env)]
    found = [root]
    for folder, path in ops_info_files(root):
        if os.path.join(root, folder) not in found:
            found.append(os.path.join(root, folder))
        found.append(path)
    return found
