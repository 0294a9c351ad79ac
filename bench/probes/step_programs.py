"""Whole steps for the step view, recorded under ncu by ``scripts/record-steps``.

Each step runs twice for warm-up, then once inside the NVTX start/end range ``step`` (process
wide, so the backward pass on autograd's thread is inside it too) with torch's operator ranges
and shapes on (``torch.autograd.profiler.emit_nvtx(record_shapes=True)``), as ncu records:

  layer       a bf16 TransformerEncoderLayer training step (forward + backward): cuBLAS,
              attention (cuDNN or PyTorch's flash kernels), ATen elementwise and layer norm
  chain       the user's Triton kernel (a column gather), an unfused chain of five ATen
              elementwise ops over one tensor, a cuBLAS GEMM; two micro-batches
  chain_ho    held out for the fusion rule: a hand-written layer norm and GELU in ATen ops
              (reductions and elementwise over one tensor), then a cuBLAS GEMM
  chain_ho2   held out for the fusion rule, never looked at before scoring: a hand-written
              softmax and dropout in bf16 ATen ops over one tensor, then a residual add
  tiny        launch-bound: a per-tensor SGD update over 48 small tensors (48 tiny kernels)
  tiny_ho     held out for the launch rule: per-tensor gradient norms and clipping of 16
              small tensors (reductions and scalings, one launch each)
  layer_ho    held out for the never-silent rule (written with its
              expectation before any recording; recorded and scored on the H200 on
              2026-12-04, every expectation met): a bf16 attention block
              (cuBLAS), a depthwise conv1d (cuDNN), an unfused fp32 chain over one tensor
              (cast, scale, bias, GELU, residual) and the user's Triton kernel
              ``user_col_scale``. Expected, read as a report alone: unfused_chain fires; no
              kernel of >= 5 % says "no cause found"; user_col_scale is owned "yours"; the
              text answers start with the step summary.

    python3 bench/probes/step_programs.py STEP            (the step, as ncu runs it)
    python3 bench/probes/step_programs.py STEP --wall     (median wall of 20 steps, no ncu)
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import torch
import triton
import triton.language as tl

DEV = "cuda"


@triton.jit
def user_col_gather(x_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    """y[r, c] = x[c % rows, r]-style transposed read: neighbouring programs read columns."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < rows * cols
    r = offs % rows
    c = offs // rows
    v = tl.load(x_ptr + r * cols + c, mask=mask)
    tl.store(y_ptr + offs, v * 1.5, mask=mask)


def layer_step() -> Callable[[], None]:
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        d_model=1024,
        nhead=16,
        dim_feedforward=4096,
        dropout=0.1,
        batch_first=True,
        device=DEV,
        dtype=torch.bfloat16,
    ).train()
    x = torch.randn(8, 512, 1024, device=DEV, dtype=torch.bfloat16, requires_grad=True)

    def step() -> None:
        out = layer(x)
        out.float().square().mean().backward()

    return step


@triton.jit
def user_col_scale(x_ptr, s_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    """y[r, c] = x[r, c] * s[c], one program per column block read down the rows."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < rows * cols
    c = offs // rows
    r = offs % rows
    v = tl.load(x_ptr + r * cols + c, mask=mask)
    tl.store(y_ptr + r * cols + c, v * tl.load(s_ptr + c, mask=mask), mask=mask)


def layer_ho_step() -> Callable[[], None]:
    torch.manual_seed(1)
    b, t, d = 8, 512, 1024
    x = torch.randn(b, t, d, device=DEV, dtype=torch.bfloat16)
    attn = torch.nn.MultiheadAttention(d, 16, batch_first=True, device=DEV, dtype=torch.bfloat16)
    conv = torch.nn.Conv1d(d, d, 3, padding=1, groups=d, device=DEV, dtype=torch.bfloat16)
    bias = torch.randn(d, device=DEV)
    scale = torch.rand(d, device=DEV)
    rows, cols = b * t, d
    out = torch.empty(rows, cols, device=DEV)

    def step() -> None:
        with torch.no_grad():
            h, _ = attn(x, x, x, need_weights=False)
            h = conv(h.transpose(1, 2)).transpose(1, 2)
            y = h.float().reshape(rows, cols)  # the unfused fp32 chain
            y = y * 0.5
            y = y + bias
            y = torch.nn.functional.gelu(y)
            y = y + x.float().reshape(rows, cols)
            grid = (triton.cdiv(rows * cols, 1024),)
            user_col_scale[grid](y.contiguous(), scale, out, rows, cols, BLOCK=1024)

    return step


def chain_step() -> Callable[[], None]:
    rows, cols = 4096, 4096
    x = torch.randn(rows, cols, device=DEV)
    g = torch.empty_like(x)
    bias = torch.randn(cols, device=DEV)
    res = torch.randn(rows, cols, device=DEV)
    w = torch.randn(cols, 1024, device=DEV, dtype=torch.bfloat16)

    def step() -> None:
        for _ in range(1):  # one micro-batch (each kernel adds ~1.5 MB to the report)
            user_col_gather[(triton.cdiv(rows * cols, 1024),)](x, g, rows, cols, BLOCK=1024)
            y = g * 0.5
            y = y + bias
            y = torch.nn.functional.gelu(y)
            y = y * 0.9
            y = y + res
            (y.to(torch.bfloat16) @ w).sum()

    return step


def chain_ho_step() -> Callable[[], None]:
    x = torch.randn(8192, 2048, device=DEV)
    gamma = torch.randn(2048, device=DEV)
    beta = torch.randn(2048, device=DEV)
    w = torch.randn(2048, 2048, device=DEV, dtype=torch.bfloat16)

    def step() -> None:
        mu = x.mean(-1, keepdim=True)
        d = x - mu
        var = (d * d).mean(-1, keepdim=True)
        h = d * torch.rsqrt(var + 1e-5)
        h = h * gamma + beta
        h = 0.5 * h * (1.0 + torch.tanh(0.79788456 * (h + 0.044715 * h * h * h)))
        _ = h.to(torch.bfloat16) @ w

    return step


def chain_ho2_step() -> Callable[[], None]:
    x = torch.randn(4096, 4096, device=DEV, dtype=torch.bfloat16)
    keep = torch.rand(4096, 4096, device=DEV) > 0.1
    res = torch.randn(4096, 4096, device=DEV, dtype=torch.bfloat16)

    def step() -> None:
        m = x.amax(-1, keepdim=True)
        e = torch.exp(x - m)
        p = e / e.sum(-1, keepdim=True)
        p = p * keep / 0.9
        _ = p + res

    return step


def tiny_step() -> Callable[[], None]:
    params = [torch.randn(1024, device=DEV) for _ in range(24)]
    grads = [torch.randn(1024, device=DEV) for _ in range(24)]

    def step() -> None:
        for p, g in zip(params, grads, strict=True):
            p.mul_(0.999)
            p.add_(g, alpha=-0.01)

    return step


def tiny_ho_step() -> Callable[[], None]:
    grads = [torch.randn(512 + 16 * i, device=DEV) for i in range(16)]

    def step() -> None:
        norms = [g.norm() for g in grads]
        for g, n in zip(grads, norms, strict=True):
            g.mul_(1.0 / (n + 1e-6))

    return step


STEPS = {
    "layer": layer_step,
    "chain": chain_step,
    "chain_ho": chain_ho_step,
    "chain_ho2": chain_ho2_step,
    "tiny": tiny_step,
    "tiny_ho": tiny_ho_step,
    "layer_ho": layer_ho_step,
}


def main(argv: list[str]) -> None:
    step = STEPS[argv[1]]()
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    if "--wall" in argv:
        walls = []
        for _ in range(20):
            t = time.perf_counter()
            step()
            torch.cuda.synchronize()
            walls.append(time.perf_counter() - t)
        walls.sort()
        print(json.dumps({"step": argv[1], "wall_median_us": round(walls[10] * 1e6, 1)}))
        return
    with torch.autograd.profiler.emit_nvtx(record_shapes=True):  # type: ignore[no-untyped-call]
        rid = torch.cuda.nvtx.range_start("step")
        step()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_end(rid)


if __name__ == "__main__":
    main(sys.argv)
