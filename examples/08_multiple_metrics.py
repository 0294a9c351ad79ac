"""08 - several ncu metrics in one run.

A matmul (compute-heavy) and a row softmax (memory-heavy) are measured with three metrics
at once: kernel time and the SM and DRAM throughput as a percentage of peak. The two
throughput numbers put each kernel on its side of the compute/memory divide.

Shows:
- ``metrics=[...]`` with several names: the results hold one row per (annotation, config,
  metric), told apart by the ``Metric`` column, each with its own ``Unit``.
- ``analyze.plot(metric=...)`` to plot one of them (a plot shows one metric).
- Reshaping with pandas: one column per metric.

Run::

    python examples/08_multiple_metrics.py

The plot goes to ``08_multiple_metrics.png`` in the current directory, or in the folder
named by the environment variable ``NSIGHT_AGENT_EXAMPLE_OUT``.
"""

import os
from pathlib import Path

import pandas as pd
import torch

import nsight_agent

OUT_DIR = Path(os.environ.get("NSIGHT_AGENT_EXAMPLE_OUT", "."))
METRICS = [
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
]


@nsight_agent.analyze.plot(
    filename=str(OUT_DIR / "08_multiple_metrics.png"),
    metric="sm__throughput.avg.pct_of_peak_sustained_elapsed",
    title="SM throughput: matmul vs softmax",
    ylabel="SM throughput (% of peak)",
)
@nsight_agent.analyze.kernel(configs=[(1024,), (2048,), (4096,)], runs=3, metrics=METRICS)
def matmul_and_softmax(n: int) -> None:
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    with nsight_agent.annotate("matmul"):
        _ = a @ b
    with nsight_agent.annotate("softmax"):
        _ = torch.softmax(a, dim=-1)


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    results = matmul_and_softmax()
    df = results.to_dataframe()
    print(df[["Annotation", "n", "Metric", "AvgValue", "Unit"]].to_string(index=False))

    wide = df.pivot_table(index=["Annotation", "n"], columns="Metric", values="AvgValue")
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(f"\none column per metric:\n{wide[METRICS].round(1)}")

    if set(df["Metric"]) != set(METRICS):
        raise RuntimeError(f"expected metrics {METRICS}, got {sorted(set(df['Metric']))}")
    print(f"\nplot: {OUT_DIR / '08_multiple_metrics.png'}")


if __name__ == "__main__":
    main()
