"""The board's shapes for an ONNX with open dims: the ``atc`` line an emulated convert records, and what a
decoder needs on the device (issue 49). Pure: input specs and params in, argv and words out.

ATC needs ``--input_shape`` for every input with a non-fixed dim ("If the original model has a non-fixed
shape, --input_shape is required", atlasatcparam_16_0016), as fixed dims, as -1 dims with one gear option
(``--dynamic_batch_size`` / ``--dynamic_image_size`` / ``--dynamic_dims``, at most 100 gears,
atlasatcparam_16_0018/0020), or as a shape range (-1 / lo~hi), which Ascend310 and Ascend310B* do not take
(``precision.dynamic_shapes``). The emulator runs any shape, so it never needed them; its recorded
"equivalent" line did not have them, and atc refused it. ``equivalent_argv`` gives the line the ascend
backend would run for the same params (``dynamic_shapes.resolve``: the given input_shape or gears, else
the export's example shapes, else batch 1 for an open batch axis); where that leaves a dim open (a
decoder's sequence and cache lengths), the line fixes each such dim at 1, a placeholder atc accepts, and
the warnings say so, with the dry run's words and the recipe: a prefill OM and a decode OM with static
shapes, or one OM with ``--dynamic_dims`` gears (docs/decoders.md).
"""

from __future__ import annotations

import re

from ascendpipe.errors import UserError

# names of a KV cache's inputs (HF's past_key_values.N.key, Qwen/LLaMA exports' past_key_N, ours past_key)
CACHE_NAME = re.compile(r"past|cache|present|key_values", re.IGNORECASE)
TOKEN_NAME = re.compile(r"input_ids|position_ids|attention_mask|cache_position|token", re.IGNORECASE)


def _open(dim) -> bool:
    return not (isinstance(dim, int) and dim >= 0)


def open_inputs(specs) -> list:
    """The input specs with a non-fixed dim."""
    return [s for s in specs if any(_open(d) for d in s.shape)]


def is_decoder(specs) -> bool:
    """A decoder's inputs: token inputs with an open length, or a KV cache with an open length."""
    opened = open_inputs(specs)
    cache = [s for s in opened if CACHE_NAME.search(s.name)]
    tokens = [s for s in opened if TOKEN_NAME.search(s.name) and any(_open(d) for d in list(s.shape)[1:])]
    return bool(cache) or len(tokens) >= 2


def _role(dim, axis: int) -> str:
    """'batch', 'cache' (the cache's length), 'total' (cache + new tokens) or 'tokens' (the new tokens)."""
    name = str(dim).lower() if isinstance(dim, str) else ""
    if axis == 0 and (not name or "batch" in name):
        return "batch"
    if re.search(r"past|cache", name):
        return "total" if "+" in name else "cache"
    if re.search(r"total|all|kv|full", name):
        return "total"
    return "tokens"


# what each role is in a prefill OM (the prompt in one run, the cache empty) and a decode OM (one new token
# after a cache of CACHE positions)
_PREFILL = {"batch": "1", "cache": "0", "total": "PROMPT", "tokens": "PROMPT"}
_DECODE = {"batch": "1", "cache": "CACHE", "total": "CACHE+1", "tokens": "1"}


def _template(specs, values: dict[str, str]) -> str:
    parts = []
    for s in specs:
        dims = [str(d) if not _open(d) else values[_role(d, axis)] for axis, d in enumerate(s.shape)]
        parts.append(f"{s.name}:{','.join(dims)}")
    return ";".join(parts)


def recipe(specs) -> str:
    """The decoder recipe for these inputs: the prefill and decode OMs' --input_shape templates, or gears."""
    opened = open_inputs(specs)
    cache = [s.name for s in opened if CACHE_NAME.search(s.name)]
    empty = (" (an empty cache: a 0 dim, or export the prefill graph without cache inputs)" if cache else "")
    return (f"a decoder runs on the board as two static OMs: a prefill OM, --input_shape="
            f"\"{_template(opened, _PREFILL)}\"{empty}, and a decode OM, "
            f"--input_shape=\"{_template(opened, _DECODE)}\" "
            f"(PROMPT: the prompt length, CACHE: the cache length the decode OM is built for); or one OM with "
            f"-1 at those dims and --dynamic_dims gears (at most 100, one value per -1 in order) covering the "
            f"lengths you run; see docs/decoders.md")


NEEDS = "needs --input_shape"  # dynamic_shapes' words where an open dim has no shape


def _show(shape) -> str:
    return "[" + ",".join(str(d) if not _open(d) else (d if isinstance(d, str) and d else "?") for d in shape) + "]"


def needs_shapes(specs) -> str:
    """What atc needs, naming every input with an open dim (the dry run names the first)."""
    listing = ", ".join(f"{s.name} {_show(s.shape)}" for s in open_inputs(specs))
    return (f"atc needs --input_shape for every input with a non-fixed dim: {listing} (ATC: 'If the original model "
            f"has a non-fixed shape, --input_shape is required', atlasatcparam_16_0016)")


def advice(specs) -> str:
    """What to give: a decoder's recipe, else input_shape or a gear option."""
    if is_decoder(specs):
        return recipe(specs)
    return "give input_shape (the shapes you run) or a gear option (dynamic_batch_size, dynamic_dims)"


def _placeholder_shape(specs) -> dict[str, list[int]]:
    """Every input with an open dim, each open dim at 1 (batch 1, one token, a 1-position cache)."""
    return {s.name: [d if not _open(d) else 1 for d in s.shape] for s in open_inputs(specs)}


GIVEN, EXAMPLE, BATCH, PLACEHOLDER, NONE = "given", "export example", "batch 1", "placeholder", "none"
GIVEN_OPTIONS = ("input_shape", "dynamic_batch_size", "dynamic_image_size", "dynamic_dims", "input_shape_range")


def shape_options(specs, params: dict, soc_version: str | None, *, examples: dict | None = None,
                  aipp: bool = False) -> tuple[list[str], list[str], str]:
    """(the --input_shape / gear options atc takes for these inputs, warning lines, where they came from:
    ``GIVEN`` params, an ``EXAMPLE`` of the export, ``BATCH`` 1 for an open batch axis, a ``PLACEHOLDER``,
    or ``NONE`` needed). The options are the ascend backend's (``dynamic_shapes.resolve``) where it
    resolves them; else a placeholder of 1 for each open dim, with the dry run's words, and for a decoder
    the recipe."""
    from ascendpipe.precision.dynamic_shapes import resolve
    from ascendpipe.precision.input_shape import format_input_shape

    try:
        plan = resolve(specs, params or {}, soc_version=soc_version, examples=examples, aipp=aipp)
    except UserError as err:
        shape = _placeholder_shape(specs)
        if not shape:  # nothing open: the error is about the given options themselves
            return [], [f"warning: atc would refuse this convert's shape options: {err.message}"], NONE
        lines = [f"warning: on the board {needs_shapes(specs) if NEEDS in err.message else err.message}"]
        what = ("the equivalent atc line (convert.json atc_argv) fixes each open dim at 1 ("
                + format_input_shape(shape) + "), a placeholder atc accepts")
        lines.append(f"warning: {what}: {advice(specs)}")
        return [f"--input_shape={format_input_shape(shape)}"], lines, PLACEHOLDER
    # resolved: the line has what the ascend backend passes (its dry run shows the batch-1 case as a note,
    # an informational '=' line: no warning here either; convert.json's atc_shapes says where it came from)
    given = any(params.get(k) not in (None, "", [], {}) for k in GIVEN_OPTIONS)
    options = plan.atc_options()
    return options, [], (GIVEN if given else EXAMPLE if examples else BATCH) if options else NONE


def equivalent_argv(settings, model: str, output: str, specs, params: dict | None = None, *,
                    examples: dict | None = None, remedy_dir: str = ".") -> tuple[list[str], list[str], dict]:
    """(the atc line an emulated convert records, one atc accepts: its settings and the shape options
    ``shape_options`` gives; warning lines; convert.json's ``atc_shapes``: {"options", "source"}, so a
    line repeating the conversion (``cli/apply_line``) takes only what was given). It names a
    --soc_version only where the convert was given one (atc needs the board's)."""
    from ascendpipe.backends.ascend import atc
    from ascendpipe.precision.settings import REMEDY_NAMES

    paths = {name: f"{remedy_dir}/{REMEDY_NAMES[name]}" for name in settings.remedy_files()}
    if settings.fusion_switch_source:  # the same file goes to atc
        paths["fusion_switch"] = settings.fusion_switch_source[0]
    s = atc.from_convert_settings(settings, model, output, paths, strict=False)
    merged = dict(params or {})
    if settings.input_shape and not merged.get("input_shape"):
        merged["input_shape"] = settings.input_shape
    options, lines, source = shape_options(specs, merged, settings.soc_version, examples=examples,
                                           aipp=bool(settings.aipp))
    s.input_shape, s.shape_options = None, options
    return atc.convert_argv("atc", s, check=False), lines, {"options": options, "source": source}
