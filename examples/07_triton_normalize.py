"""07 - a Triton kernel against PyTorch: normalised results and variant lines.

A Triton vector add is profiled next to ``torch.add`` for several vector lengths and
several Triton block sizes. With ``normalize_against="torch"`` every ``AvgValue`` is divided
by the torch annotation's ``AvgValue`` for the same config, so the plot reads directly as
"time relative to PyTorch" (below 1: Triton is faster).

Shows:
- Profiling a ``@triton.jit`` kernel defined at module level, as Triton code usually is (the
  profiled function and the kernel it calls travel to the profiled process with it).
- ``normalize_against="torch"``; the torch rows become 1.0 and ``NormalizationValue`` keeps
  the torch time that was divided by.
- ``variant_fields=["block_size"]`` with ``variant_annotations=["triton"]``: one line per
  block size for the Triton annotation, while the x axis stays the vector length.
- A correctness check of the Triton output against torch, outside the measured ranges.

Run (needs Triton as well as PyTorch)::

    python examples/07_triton_normalize.py

The plot goes to ``07_triton_normalize.png`` in the current directory, or in the folder
named by the environment variable ``NSIGHT_AGENT_EXAMPLE_OUT``.
"""

import itertools
import os
from pathlib import Path

import torch
import triton
import triton.language as tl

import nsight_agent

OUT_DIR = Path(os.environ.get("NSIGHT_AGENT_EXAMPLE_OUT", "."))
LENGTHS = [2**16, 2**18, 2**20, 2**22]
BLOCK_SIZES = [128, 512, 2048]
CONFIGS = list(itertools.product(LENGTHS, BLOCK_SIZES))


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def triton_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, block_size: int) -> None:
    n = x.numel()
    add_kernel[(triton.cdiv(n, block_size),)](x, y, out, n, BLOCK_SIZE=block_size)


@nsight_agent.analyze.plot(
    filename=str(OUT_DIR / "07_triton_normalize.png"),
    title="vector add: time relative to torch.add",
    ylabel="time / torch time (lower is better)",
    variant_fields=["block_size"],
    variant_annotations=["triton"],
)
@nsight_agent.analyze.kernel(configs=CONFIGS, runs=5, normalize_against="torch")
def vector_add(n: int, block_size: int) -> None:
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    expected = torch.empty_like(x)
    out = torch.empty_like(x)
    with nsight_agent.annotate("torch"):
        torch.add(x, y, out=expected)
    with nsight_agent.annotate("triton"):
        triton_add(x, y, out, block_size)
    torch.testing.assert_close(out, expected)


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    results = vector_add()
    df = results.to_dataframe()
    triton_rows = df[df["Annotation"] == "triton"]
    print("Triton time / torch time (rows: n, columns: block_size):")
    print(triton_rows.pivot_table(index="n", columns="block_size", values="AvgValue").round(3))
    print("\ntorch time the rows were divided by (ns):")
    print(triton_rows.pivot_table(index="n", values="NormalizationValue").round(0))

    torch_rows = df[df["Annotation"] == "torch"]
    if not ((torch_rows["AvgValue"] - 1.0).abs() < 1e-9).all():
        raise RuntimeError(f"torch rows should normalise to 1.0, got:\n{torch_rows}")
    print(f"\nplot: {OUT_DIR / '07_triton_normalize.png'}")


if __name__ == "__main__":
    main()
