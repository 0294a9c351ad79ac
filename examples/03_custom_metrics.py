"""03 - derived metrics: TFLOP/s and arithmetic intensity of a matmul.

ncu measures kernel time (``gpu__time_duration.sum``, ns) and the bytes moved to and from
DRAM (``dram__bytes.sum``). ``derive_metric`` turns them, together with the config, into the
numbers that matter for a matmul: achieved TFLOP/s, and FLOPs per DRAM byte (arithmetic
intensity, the x axis of a roofline).

Shows:
- ``derive_metric(*metric_values, *config_params)``: the metric values come first, in the
  order of ``metrics``, then the parameters of the profiled function.
- Returning a dict of ``name -> (value, unit)``: each entry becomes its own ``Metric`` in the
  results, next to the measured ones.
- ``analyze.plot(metric="TFLOPS")`` to pick one metric when the results hold several.

Run::

    python examples/03_custom_metrics.py

The plot goes to ``03_custom_metrics.png`` in the current directory, or in the folder named
by the environment variable ``NSIGHT_AGENT_EXAMPLE_OUT``.
"""

import os
from pathlib import Path

import torch

import nsight_agent

OUT_DIR = Path(os.environ.get("NSIGHT_AGENT_EXAMPLE_OUT", "."))
METRICS = ["gpu__time_duration.sum", "dram__bytes.sum"]


def tflops_and_intensity(time_ns: float, dram_bytes: float, n: int) -> dict[str, tuple[float, str]]:
    """Metric values first (in the order of METRICS), then the config (``n``)."""
    flops = 2.0 * n**3  # one multiply and one add per inner-product term
    return {
        "TFLOPS": (flops / (time_ns * 1e-9) / 1e12, "TFLOP/s"),
        "ArithmeticIntensity": (flops / dram_bytes if dram_bytes else float("nan"), "FLOP/byte"),
    }


@nsight_agent.analyze.plot(
    filename=str(OUT_DIR / "03_custom_metrics.png"),
    metric="TFLOPS",
    title="bf16 matmul throughput",
    ylabel="TFLOP/s",
    annotate_points=True,
)
@nsight_agent.analyze.kernel(
    configs=[(512,), (1024,), (2048,)],
    runs=5,
    metrics=METRICS,
    derive_metric=tflops_and_intensity,
)
def matmul(n: int) -> None:
    # bf16: one cuBLAS kernel at every size here (fp32 may add a split-K kernel when small)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    with nsight_agent.annotate("torch"):
        _ = a @ b


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    results = matmul()
    df = results.to_dataframe()
    print(df[["Metric", "n", "AvgValue", "StdDev", "Unit"]].to_string(index=False))

    derived = df[df["Metric"].isin(["TFLOPS", "ArithmeticIntensity"])]
    print("\nderived metrics per size:")
    print(derived.pivot_table(index="n", columns="Metric", values="AvgValue").round(2))

    missing = {*METRICS, "TFLOPS", "ArithmeticIntensity"} - set(df["Metric"])
    if missing:
        raise RuntimeError(f"metrics missing from the results: {sorted(missing)}")
    print(f"\nplot: {OUT_DIR / '03_custom_metrics.png'}")


if __name__ == "__main__":
    main()
