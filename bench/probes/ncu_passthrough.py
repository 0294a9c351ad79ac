"""Probe kernels for the diagnosis's last resort: kernels whose limiter none of our checks
names (the special-function unit, the integer ALU, barriers), so that ncu's own rules may be
passed through as ``ncu_rule`` causes. Each entry launches one Triton kernel::

    nsight-agent diagnose bench/probes/ncu_passthrough.py --entry run_sfu --config n=1048576
"""

import torch
import triton
import triton.language as tl

ITERS = 256
BLOCK = 1024


@triton.jit
def sfu_kernel(x_ptr, out_ptr, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    for _ in range(ITERS):  # MUFU.SIN each step: the XU pipe, not a FLOP peak
        x = tl.inline_asm_elementwise(
            "sin.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1
        )
    tl.store(out_ptr + offs, x, mask=mask)


@triton.jit
def hash_kernel(out_ptr, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    h = offs.to(tl.uint32) + 1
    for _ in range(ITERS):  # xorshift: integer shifts and xors only
        h ^= h << 13
        h ^= h >> 17
        h ^= h << 5
    tl.store(out_ptr + offs, h.to(tl.int32), mask=mask)


@triton.jit
def barrier_kernel(x_ptr, out_ptr, n, ITERS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(x_ptr + offs, mask=mask)
    for _ in range(ITERS):  # a CTA barrier after every step of little work
        acc = acc * 1.0001 + 0.5
        tl.debug_barrier()
    tl.store(out_ptr + offs, acc, mask=mask)


def setup(n: int, device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.rand(n, device=device)
    return x, torch.empty_like(x)


def _grid(n: int) -> tuple[int]:
    return (triton.cdiv(n, BLOCK),)


def run_sfu(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    sfu_kernel[_grid(x.numel())](x, out, x.numel(), ITERS=ITERS, BLOCK=BLOCK)
    return out


def run_hash(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    ints = out.view(torch.int32)
    hash_kernel[_grid(x.numel())](ints, x.numel(), ITERS=ITERS, BLOCK=BLOCK)
    return ints


def run_barrier(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    barrier_kernel[_grid(x.numel())](x, out, x.numel(), ITERS=ITERS, BLOCK=BLOCK, num_warps=16)
    return out
