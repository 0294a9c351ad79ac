"""04 - several parameters: matmul size crossed with data type.

Shows:
- A function with two parameters, ``(n, dtype)``; ``configs`` lists every combination
  (built with ``itertools.product``) and each parameter becomes a column of the results.
- Config values kept as plain strings (``"bfloat16"``), turned into torch dtypes inside
  the function; strings print, sort and round-trip through CSV cleanly.
- A ``derive_metric`` written as ``(time_ns, *config)`` so it does not depend on how many
  parameters follow; it returns one ``(value, unit)`` tuple, which becomes a metric named
  after the function (``tflops``).
- Reshaping the results with pandas (one row per size, one column per dtype).

Run::

    python examples/04_multi_parameter.py

The plot goes to ``04_multi_parameter.png`` in the current directory, or in the folder
named by the environment variable ``NSIGHT_AGENT_EXAMPLE_OUT``.
"""

import itertools
import os
from pathlib import Path
from typing import Any

import torch

import nsight_agent

OUT_DIR = Path(os.environ.get("NSIGHT_AGENT_EXAMPLE_OUT", "."))
SIZES = [1024, 2048, 4096]  # sizes where cuBLAS runs each matmul as one kernel
DTYPES = ["float32", "float16", "bfloat16"]
CONFIGS = list(itertools.product(SIZES, DTYPES))


def tflops(time_ns: float, *config: Any) -> tuple[float, str]:
    n = config[0]  # the dtype does not change the FLOP count
    return 2.0 * n**3 / (time_ns * 1e-9) / 1e12, "TFLOP/s"


@nsight_agent.analyze.plot(
    filename=str(OUT_DIR / "04_multi_parameter.png"),
    metric="tflops",
    title="matmul throughput by size and dtype",
    ylabel="TFLOP/s",
    plot_width=10,
)
@nsight_agent.analyze.kernel(configs=CONFIGS, runs=5, derive_metric=tflops)
def matmul(n: int, dtype: str) -> None:
    torch_dtype = getattr(torch, dtype)
    a = torch.randn(n, n, device="cuda", dtype=torch_dtype)
    b = torch.randn(n, n, device="cuda", dtype=torch_dtype)
    with nsight_agent.annotate("torch"):
        _ = a @ b


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    results = matmul()
    df = results.to_dataframe()
    rate = df[df["Metric"] == "tflops"]
    print("TFLOP/s (rows: n, columns: dtype):")
    print(rate.pivot_table(index="n", columns="dtype", values="AvgValue")[DTYPES].round(1))

    if len(rate) != len(CONFIGS):
        raise RuntimeError(f"expected {len(CONFIGS)} tflops rows, got {len(rate)}:\n{df}")
    print(f"\nplot: {OUT_DIR / '04_multi_parameter.png'}")


if __name__ == "__main__":
    main()
