"""The size sweep both profilers measure: one fp16 matmul per annotation, sizes 512..4096."""

from __future__ import annotations

import torch

SIZES = [512, 1024, 2048, 4096]
RUNS = 10


def matmul_inputs(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(n)
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    a @ b  # cuBLAS handle and heuristics warmed up outside the measured range
    torch.cuda.synchronize()
    return a, b
