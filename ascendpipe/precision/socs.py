"""What a ``soc_version`` may be: one of the families ``atc_passes.soc_family`` knows (ATC's --soc_version
names one SoC of a family). An empty, a path-like or an unknown name would otherwise be taken as the
Ascend310 defaults without a word. No imports: the convert kind's schema reads it on every load."""

# Ascend950*: the precision policies know it (precision/chips.py: HiFloat8, HF32 with 10 mantissa bits)
SOC_PATTERN = r"^Ascend(310|310P[0-9]*|310B[0-9]*|910[A-Za-z0-9_]*|950[A-Za-z0-9_]*)$"
SOC_EXAMPLES = "Ascend310, Ascend310P3, Ascend310B1, Ascend910A, Ascend910B1, Ascend910_9391, Ascend950PR"
