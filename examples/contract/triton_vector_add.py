"""Kernel contract example (language="triton"): a Triton vector add against torch.add.

Profile both, with torch as the baseline whose outputs the Triton kernel must match::

    ProfileRequest(source=<this file>, language="triton", configs={"n": [4096, 1 << 20]},
                   variants=[Variant(name="torch", entry="reference"),
                             Variant(name="triton", entry="run")], baseline="torch")
"""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def setup(n: int, block_size: int = 1024, device: str = "cuda"):
    """Inputs of one config: built once, outside the measured range."""
    x = torch.randn(n, device=device)
    y = torch.randn(n, device=device)
    return x, y, torch.empty_like(x), block_size


def run(x, y, out, block_size):
    """The measured entry point: one kernel launch; returns its output."""
    n = x.numel()
    add_kernel[(triton.cdiv(n, block_size),)](x, y, out, n, BLOCK_SIZE=block_size)
    return out


def reference(x, y, out, block_size):
    """Baseline: the same result from PyTorch."""
    return torch.add(x, y)
