"""nsight-agent side of bench/compare_sweep.py: profile the sweep, write the processed CSV."""

from __future__ import annotations

import sys

import nsight_agent
from bench.sweep_kernels import RUNS, SIZES, matmul_inputs


@nsight_agent.analyze.kernel(
    configs=SIZES, runs=RUNS, clock_control="none", cache_control="all",
    combine_kernel_metrics=lambda a, b: a + b, verbosity="quiet",
)  # fmt: skip
def sweep(n: int) -> None:
    a, b = matmul_inputs(n)
    with nsight_agent.annotate("matmul"):
        a @ b


if __name__ == "__main__":
    sweep().to_dataframe().to_csv(sys.argv[1], index=False)
