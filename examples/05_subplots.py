"""05 - a grid of subplots: one row per dtype, one column per operand layout.

Three parameters are swept: the size ``n`` (the x axis), the data type and whether the
second operand is transposed. ``row_panels`` and ``col_panels`` split the plot into one
panel per value of those parameters, so each panel is a plain size sweep.

Shows:
- ``analyze.plot(row_panels=["dtype"], col_panels=["layout"])``.
- A derived TFLOP/s metric (dict form) plotted with ``metric="TFLOPS"``.

Run::

    python examples/05_subplots.py

The plot goes to ``05_subplots.png`` in the current directory, or in the folder named by the
environment variable ``NSIGHT_AGENT_EXAMPLE_OUT``.
"""

import itertools
import os
from pathlib import Path

import torch

import nsight_agent

OUT_DIR = Path(os.environ.get("NSIGHT_AGENT_EXAMPLE_OUT", "."))
SIZES = [1024, 2048, 4096]  # sizes where cuBLAS runs each matmul as one kernel
DTYPES = ["float32", "bfloat16"]
LAYOUTS = ["A @ B", "A @ B.T"]
CONFIGS = list(itertools.product(SIZES, DTYPES, LAYOUTS))


def tflops(time_ns: float, n: int, dtype: str, layout: str) -> dict[str, tuple[float, str]]:
    return {"TFLOPS": (2.0 * n**3 / (time_ns * 1e-9) / 1e12, "TFLOP/s")}


@nsight_agent.analyze.plot(
    filename=str(OUT_DIR / "05_subplots.png"),
    metric="TFLOPS",
    title="matmul throughput",
    ylabel="TFLOP/s",
    row_panels=["dtype"],
    col_panels=["layout"],
    annotate_points=True,
)
@nsight_agent.analyze.kernel(configs=CONFIGS, runs=5, derive_metric=tflops)
def matmul(n: int, dtype: str, layout: str) -> None:
    torch_dtype = getattr(torch, dtype)
    a = torch.randn(n, n, device="cuda", dtype=torch_dtype)
    b = torch.randn(n, n, device="cuda", dtype=torch_dtype)
    if layout == "A @ B.T":
        b = b.t()  # a transposed view: cuBLAS reads it as a transposed operand, no copy
    with nsight_agent.annotate("torch"):
        _ = a @ b


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    results = matmul()
    df = results.to_dataframe()
    rate = df[df["Metric"] == "TFLOPS"]
    print(rate.pivot_table(index="n", columns=["dtype", "layout"], values="AvgValue").round(1))

    if len(rate) != len(CONFIGS):
        raise RuntimeError(f"expected {len(CONFIGS)} TFLOPS rows, got {len(rate)}:\n{df}")
    print(f"\nplot: {OUT_DIR / '05_subplots.png'}")


if __name__ == "__main__":
    main()
