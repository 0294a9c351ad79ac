"""Kernel contract example (language="triton"): a step with the user's own Triton kernel (a
transposed gather: neighbouring threads read addresses a row apart), an unfused chain of five
ATen elementwise ops over one tensor, and a cuBLAS GEMM. diagnose_kernel's step view names the
chain ("unfused chain": fuse with torch.compile or one Triton kernel) and the user kernel's
cause with its source lines::

    diagnose_kernel(source=<this file>, language="triton", configs=[{"n": 4096}])
"""

import torch
import triton
import triton.language as tl


@triton.jit
def col_gather(x_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < rows * cols
    r = offs % rows
    c = offs // rows
    v = tl.load(x_ptr + r * cols + c, mask=mask)
    tl.store(y_ptr + offs, v * 1.5, mask=mask)


def setup(n: int, device: str = "cuda"):
    x = torch.randn(n, n, device=device)
    bias = torch.randn(n, device=device)
    res = torch.randn(n, n, device=device)
    w = torch.randn(n, 1024, device=device, dtype=torch.bfloat16)
    return x, bias, res, w


def run(x, bias, res, w):
    g = torch.empty_like(x)
    n = x.shape[0]
    col_gather[(triton.cdiv(n * n, 1024),)](x, g, n, n, BLOCK=1024)
    y = g * 0.5
    y = y + bias
    y = torch.nn.functional.gelu(y)
    y = y * 0.9
    y = y + res
    return y.to(torch.bfloat16) @ w
