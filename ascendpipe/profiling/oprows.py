"""One kernel execution as both backends report it: the shared row behind every profile output."""

from __future__ import annotations

from dataclasses import dataclass, field

# Kernels onnxruntime adds on the host that are no op of the model (its NCHWc layout reorders, host/device
# copies): the device has no such task, so they are labelled HOST_CPU, not an AI core.
HOST_OP_TYPES = frozenset({"ReorderInput", "ReorderOutput", "MemcpyFromHost", "MemcpyToHost"})
HOST_TASK_TYPE = "HOST_CPU"
# Op types the device runs on the cube unit (AI Core); the rest go to the vector unit.
CUBE_OP_TYPES = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "FusedConv", "FusedMatMul",
                           "FusedGemm", "NchwcConv", "QLinearConv", "QLinearMatMul", "MatMulInteger"})


@dataclass(frozen=True)
class TensorDesc:
    dtype: str  # msprof spelling: FLOAT, FLOAT16, INT64, ...
    shape: tuple[int, ...]


@dataclass(frozen=True)
class OpRow:
    iteration: int  # 0-based, counted after warm-up
    index: int  # position of the kernel within its iteration
    op_name: str
    op_type: str
    start_us: float  # since the start of the profile
    duration_us: float
    wait_us: float  # gap since the previous kernel of the same iteration ended
    inputs: tuple[TensorDesc, ...] = ()
    outputs: tuple[TensorDesc, ...] = ()
    provider: str = ""
    kernel_name: str = ""  # onnxruntime's node (when op_name/op_type are the model's)
    kernel_type: str = ""
    sources: tuple[str, ...] = ()  # the model nodes the kernel computes (several: a fused kernel)

    @property
    def task_type(self) -> str:
        if self.op_type in HOST_OP_TYPES or self.kernel_type in HOST_OP_TYPES:
            return HOST_TASK_TYPE
        return "AI_CORE" if self.op_type in CUBE_OP_TYPES or self.kernel_type in CUBE_OP_TYPES else "AI_VECTOR_CORE"


@dataclass(frozen=True)
class Iteration:
    index: int
    start_us: float
    duration_us: float  # the whole model run as the profiler saw it


@dataclass
class ProfileData:
    model_name: str
    iterations: list[Iteration] = field(default_factory=list)
    ops: list[OpRow] = field(default_factory=list)
    kernel_nodes: list = field(default_factory=list)  # the optimised graph onnxruntime ran (attribution.Node)
    kernel_constants: set = field(default_factory=set)  # its initializers and inputs

    def ops_of(self, iteration: int) -> list[OpRow]:
        return [op for op in self.ops if op.iteration == iteration]
