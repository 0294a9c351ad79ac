"""Whose kernel it is: the user's, the framework's or a library's, from its name and ranges.

What an agent can change depends on the owner. The user's own Triton or CUDA kernel can be
rewritten; a cuBLAS or cuDNN kernel cannot be recompiled, only chosen differently (backend,
algorithm, shape, dtype, layout, a fused op); an ATen kernel is replaced by fusing the ops
around it. The owner comes from, in order: the kernel names defined in the user's source (when
the caller knows them), the kernel name's library prefix, the torch operator range it ran in.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from nsight_agent.source_kernels import defined_in, user_kernel_names

__all__ = ["Owner", "OwnerKind", "owner_of", "user_kernel_names"]

OwnerKind = Literal["user", "framework", "library", "compiler", "unknown"]


class Owner(BaseModel):
    """Who wrote the kernel, and so what an agent can change about it."""

    kind: OwnerKind = Field(description="library/framework kernels cannot be edited")
    who: str = Field(description="yours, ATen, cuBLAS, cuDNN, ...")


# Name patterns, first match wins. Library kernels are named by their generators.
_PATTERNS: tuple[tuple[str, OwnerKind, str], ...] = (
    (r"^nccl|ncclDevKernel|ncclKernel", "library", "NCCL"),
    (r"^unpack_cudnn", "framework", "ATen"),
    (r"pytorch_flash::|fmha_cutlass", "framework", "ATen (flash attention)"),
    (r"cudnn|^fmha_|sdpa_sm\d+|^xmma_|cudnn_generated", "library", "cuDNN"),
    (
        # cuBLAS's own names (gemv2T_kernel_val, gemvNSP_kernel, gemmk1_kernel), not any
        # name with "gemv" in it: a user's gemv_kernel is the user's.
        r"^nvjet|cublas|^sm\d+_xmma_gemm|^ampere_|^volta_|^turing_|^gemv(\d|[A-Z])|^gemmk\d|"
        r"^splitKreduce",
        "library",
        "cuBLAS",
    ),
    (r"^cutlass|cutlass::", "library", "CUTLASS"),
    (r"^triton_(poi|red|per|tem|for)_", "compiler", "torch.compile (Inductor)"),
)
# ATen's kernels by their bare names, for when the linker name is not known: loose (a user's
# ``softmax_kernel`` matches), so a known linker name outside ATen's namespaces overrules it.
_ATEN_NAMES = (
    r"at::native|elementwise_kernel|reduce_kernel|layer_norm|softmax|dropout|index_|"
    r"scatter|gather_kernel|cat_|_copy|fill_kernel|unpack_cudnn|embedding|cross_entropy|"
    r"nll_loss|topk|sort|multi_tensor_apply|foreach"
)
# Every ATen kernel is a C++ function in namespace at (at::native, at::cuda, cub's copy in
# at_cuda_detail) or c10: its linker name says so, which its bare name does not.
_ATEN_LINKER = ("_ZN2at", "_ZN3c10", "_ZNK2at", "_ZNK3c10")
# PyTorch's copy of FlashAttention lives in namespace pytorch_flash; a user's own flash_fwd
# kernel (KernelBench's attention candidates) does not.
_FLASH_LINKER = ("_ZN13pytorch_flash",)


def owner_of(
    kernel: str,
    user_kernels: set[str] | None = None,
    op: str | None = None,
    mangled: str | None = None,
) -> Owner:
    """The owner of one kernel (``op``: the torch operator range it ran in, if recorded;
    ``mangled``: its linker name, if known, ``metrics.mangled_name``)."""
    if user_kernels and defined_in(kernel, user_kernels):
        return Owner(kind="user", who="yours")
    for pattern, kind, who in _PATTERNS:
        if re.search(pattern, kernel):
            return Owner(kind=kind, who=who)
    flash = re.search(r"flash_fwd|flash_bwd", kernel)
    if flash and (mangled is None or mangled.startswith(_FLASH_LINKER)):
        return Owner(kind="framework", who="ATen (flash attention)")
    if mangled is not None and mangled.startswith(_ATEN_LINKER):
        return Owner(kind="framework", who="ATen")
    if mangled is None and re.search(_ATEN_NAMES, kernel):
        return Owner(kind="framework", who="ATen")
    if op and op.startswith(("aten::", "autograd::")):
        return Owner(kind="framework", who="ATen")
    if user_kernels:
        return Owner(kind="unknown", who="not in your source")
    # No source to check against (a report alone): a kernel of no known library, framework or
    # compiler is the user's own (a Triton or CUDA kernel they wrote).
    return Owner(kind="user", who="yours")
