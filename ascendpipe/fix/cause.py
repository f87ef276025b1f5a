"""When no keep set can work: ``compare.cube.cube_blocked`` (a cube op reading an input beyond fp16's
range on a SoC whose cube unit reads fp16 even for a kept op), which compare also uses to say its
advice cannot restore the outputs."""

from __future__ import annotations

from ascendpipe.compare.cube import cube_blocked

__all__ = ["cube_blocked"]
