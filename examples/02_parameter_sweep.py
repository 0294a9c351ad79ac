"""02 - sweep one parameter: bf16 matmul time for sizes 256 to 2048.

Shows:
- ``configs`` with several values of one parameter; each is run ``runs=10`` times.
- The aggregated columns of ``ProfileResults.to_dataframe()``: ``AvgValue``, ``StdDev`` and
  ``NumRuns`` for each (annotation, config).
- ``analyze.plot`` drawing kernel time against ``n``.

Kept deliberately plain (one kernel per annotation, the default metric) so the same
workload can be timed side by side with other profilers. The matmul is bf16 because
cuBLAS runs an fp32 matmul of these small sizes as two kernels on some GPUs (a split-K
reduction after the GEMM, e.g. on the H200 at the smaller sizes), and each annotation here
must launch exactly one kernel.

Run::

    python examples/02_parameter_sweep.py

The plot goes to ``02_parameter_sweep.png`` in the current directory, or in the folder
named by the environment variable ``NSIGHT_AGENT_EXAMPLE_OUT``.
"""

import os
from pathlib import Path

import torch

import nsight_agent

OUT_DIR = Path(os.environ.get("NSIGHT_AGENT_EXAMPLE_OUT", "."))
SIZES = [256, 512, 1024, 2048]
RUNS = 10


@nsight_agent.analyze.plot(
    filename=str(OUT_DIR / "02_parameter_sweep.png"),
    title="bf16 matmul, n x n",
    ylabel="Kernel time (ns)",
)
@nsight_agent.analyze.kernel(
    configs=[(n,) for n in SIZES], runs=RUNS, metrics=["gpu__time_duration.sum"]
)
def matmul(n: int) -> None:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    with nsight_agent.annotate("torch"):
        _ = a @ b


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    results = matmul()
    df = results.to_dataframe()
    print(df[["Annotation", "n", "AvgValue", "StdDev", "NumRuns"]].to_string(index=False))

    if sorted(df["n"]) != SIZES or not (df["NumRuns"] == RUNS).all():
        raise RuntimeError(f"expected one row per size with NumRuns={RUNS}, got:\n{df}")
    print(f"\nplot: {OUT_DIR / '02_parameter_sweep.png'}")


if __name__ == "__main__":
    main()
