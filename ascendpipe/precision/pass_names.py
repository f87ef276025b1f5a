"""Every ATC fusion pass name a fusion switch may give, with where it is defined. Pure.

atc itself takes any name in a fusion switch file and ignores the ones it has no pass for (GE
``compiler/engines/nn_engine/fusion/fusion_config_manager/fusion_config_parser.cc`` L521-575: the names
only fill a map). ascendpipe accepts the names of ATC's built-in passes (so a typo is caught rather than
silently ignored) and says, for each, where it is registered:

- canndev's passes (2022, GitHub dengguojie/vue-element-admin branch ``stp`` @7290acc7,
  ``ops/built-in/fusion_pass/**``: ``REGISTER_PASS`` = GraphFusion, ``REGISTER_BUFFER_FUSION_PASS`` =
  UBFusion), e.g. ``GroupNormFusionPass`` (``graph_fusion/ai_core/group_norm_fusion_pass.cc`` L233),
  ``LayerNormONNXFusionPass``, ``GeluONNXFusionPass``;
- GE FE's own (hicann/ge @ffdcbc9f: ``fusion_pass_name.h`` and ``REG_PASS``), e.g. ``ConvBatchnormFusionPass``,
  ``TbeReduceElemwiseFusionPass``;
- the passes the emulation's catalogue and its documented names carry (``atc_passes``: each with its
  CANN reference page).

GE's FE keeps some passes on whatever a switch says (``ForbiddenClosedPass``, ``inc/common/fusion_pass_util.h``
L18-46, e.g. ``AABiasaddConvFusion``, ``ConstToAttrReduceSumFusion``, ``BatchNormBnInferFusionPass``):
``can_switch_off`` is False for them. A name the emulation does not model fuses nothing here; the
precision plan lists it (``fusion_switch_not_modelled``).
"""

from __future__ import annotations

from dataclasses import dataclass

GRAPH, UB = "GraphFusion", "UBFusion"
FORBIDDEN_CLOSED_SOURCE = ("hicann/ge compiler/engines/nn_engine/inc/common/fusion_pass_util.h L18-46 "
                           "(ForbiddenClosedPass)")


@dataclass(frozen=True)
class PassName:
    name: str
    section: str  # GraphFusion | UBFusion
    source: str  # where it is registered (repo file:line @commit)
    can_switch_off: bool = True


def _data():
    """The extracted names (``data/pass_names.json``, written by tools/extract_op_lists.py): META,
    CANNDEV_PASSES, GE_PASSES, FORBIDDEN_CLOSED (read once: ``registry`` keeps what it makes of them)."""
    import json
    from pathlib import Path
    from types import SimpleNamespace

    return SimpleNamespace(**json.loads((Path(__file__).parent / "data" / "pass_names.json").read_text("utf-8")))


_REGISTRY: dict[str, PassName] | None = None


def registry() -> dict[str, PassName]:
    """name -> PassName of every built-in pass name found in the published source."""
    global _REGISTRY
    if _REGISTRY is None:
        data = _data()
        canndev = data.META["canndev"]["commit"][:8]
        ge = data.META["ge"]["commit"][:8]
        found: dict[str, PassName] = {}
        for table, repo, commit in ((data.CANNDEV_PASSES, "canndev", canndev), (data.GE_PASSES, "hicann/ge", ge)):
            for name, (section, path, line) in table.items():
                found.setdefault(name, PassName(name, section, f"{repo} {path}:{line} @{commit}"))
        for name in data.FORBIDDEN_CLOSED:
            entry = found.get(name) or PassName(name, UB if name.startswith("Tbe") else GRAPH, FORBIDDEN_CLOSED_SOURCE)
            found[name] = PassName(entry.name, entry.section, entry.source, can_switch_off=False)
        _REGISTRY = found
    return _REGISTRY


def lookup(name: str) -> PassName | None:
    return registry().get(name)


def close_matches(name: str, extra: tuple[str, ...] = (), n: int = 3) -> list[str]:
    """Known names a typo may have meant (a strict cutoff: a loose one offers a pass of another meaning)."""
    import difflib

    return difflib.get_close_matches(name, sorted({*registry(), *extra}), n=n, cutoff=0.85)
