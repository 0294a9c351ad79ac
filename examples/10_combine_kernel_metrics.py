"""10 - several kernels in one annotation: combine_kernel_metrics and ignore_kernel_list.

``y = a * x + b`` is computed two ways with Triton: unfused (one kernel scales, a second
adds the offset, reading and writing ``y`` again) and fused (one kernel). Each annotation
also launches a small ``clear_kernel`` that zeroes the output first, standing in for the
helper kernels libraries often launch (workspace fills, casts) that you do not want counted.

By default an annotation must contain exactly one kernel. Here:
- ``ignore_kernel_list=["clear_kernel"]`` drops the helper kernel by name;
- ``combine_kernel_metrics=lambda a, b: a + b`` folds the remaining kernels of an annotation
  into one value per metric: total time and total DRAM bytes of the unfused pair.

Shows both options, with two metrics (each combined separately) and the plot of one.

Run (needs Triton as well as PyTorch)::

    python examples/10_combine_kernel_metrics.py

The plot goes to ``10_combine_kernel_metrics.png`` in the current directory, or in the
folder named by the environment variable ``NSIGHT_AGENT_EXAMPLE_OUT``.
"""

import os
from pathlib import Path

import torch
import triton
import triton.language as tl

import nsight_agent

OUT_DIR = Path(os.environ.get("NSIGHT_AGENT_EXAMPLE_OUT", "."))
BLOCK = 1024
SCALE, SHIFT = 3.0, 0.5


@triton.jit
def clear_kernel(out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.zeros([BLOCK_SIZE], dtype=tl.float32), mask=mask)


@triton.jit
def scale_kernel(x_ptr, out_ptr, a, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, a * tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def shift_kernel(out_ptr, b, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(out_ptr + offsets, mask=mask) + b, mask=mask)


@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, a, b, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, a * tl.load(x_ptr + offsets, mask=mask) + b, mask=mask)


@nsight_agent.analyze.plot(
    filename=str(OUT_DIR / "10_combine_kernel_metrics.png"),
    metric="gpu__time_duration.sum",
    title="y = a * x + b: two kernels (summed) vs one fused kernel",
    ylabel="Total kernel time (ns)",
    annotate_points=True,
)
@nsight_agent.analyze.kernel(
    configs=[(2**18,), (2**20,), (2**22,)],
    runs=5,
    metrics=["gpu__time_duration.sum", "dram__bytes.sum"],
    ignore_kernel_list=["clear_kernel"],
    combine_kernel_metrics=lambda a, b: a + b,
)
def scale_shift(n: int) -> None:
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, BLOCK),)
    with nsight_agent.annotate("unfused"):
        clear_kernel[grid](out, n, BLOCK_SIZE=BLOCK)
        scale_kernel[grid](x, out, SCALE, n, BLOCK_SIZE=BLOCK)
        shift_kernel[grid](out, SHIFT, n, BLOCK_SIZE=BLOCK)
    torch.testing.assert_close(out, SCALE * x + SHIFT)
    with nsight_agent.annotate("fused"):
        clear_kernel[grid](out, n, BLOCK_SIZE=BLOCK)
        scale_shift_kernel[grid](x, out, SCALE, SHIFT, n, BLOCK_SIZE=BLOCK)
    torch.testing.assert_close(out, SCALE * x + SHIFT)


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    results = scale_shift()
    df = results.to_dataframe()
    print(df[["Annotation", "n", "Metric", "AvgValue", "Unit", "Kernel"]].to_string(index=False))

    if df["Kernel"].astype(str).str.contains("clear_kernel").any():
        raise RuntimeError("clear_kernel is in ignore_kernel_list but shows up in the results")
    if set(df["Annotation"]) != {"unfused", "fused"}:
        raise RuntimeError(f"expected both annotations, got {sorted(set(df['Annotation']))}")
    print(f"\nplot: {OUT_DIR / '10_combine_kernel_metrics.png'}")


if __name__ == "__main__":
    main()
