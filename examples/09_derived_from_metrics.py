"""09 - one derived metric computed from several measured metrics.

Instead of assuming a matmul does 2 * n**3 floating-point operations, count them: ncu's
SASS instruction counters give the number of FFMA (2 FLOPs each), FADD and FMUL thread
instructions that ran. Combined with the kernel time this gives the FLOP rate the hardware
actually executed, and its ratio to the textbook count. (fp32 matmul with TF32 disabled runs
on the FMA units, so the ratio should sit close to 1.)

Shows:
- ``derive_metric`` taking four metric values (in the order of ``metrics``) and then the
  config parameter ``n``.
- Returning several derived metrics with units in one dict.
- SASS counters (``smsp__sass_thread_inst_executed_op_*``) next to a timing metric; ncu
  replays the kernel as often as it needs to collect them all.

Run::

    python examples/09_derived_from_metrics.py

The plot goes to ``09_derived_from_metrics.png`` in the current directory, or in the folder
named by the environment variable ``NSIGHT_AGENT_EXAMPLE_OUT``.
"""

import os
from pathlib import Path

import torch

import nsight_agent

OUT_DIR = Path(os.environ.get("NSIGHT_AGENT_EXAMPLE_OUT", "."))
METRICS = [
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    "gpu__time_duration.sum",
]


def counted_flops(
    ffma: float, fadd: float, fmul: float, time_ns: float, n: int
) -> dict[str, tuple[float, str]]:
    flops = 2.0 * ffma + fadd + fmul
    return {
        "CountedTFLOPS": (flops / (time_ns * 1e-9) / 1e12, "TFLOP/s"),
        "CountedOverNominal": (flops / (2.0 * n**3), "ratio"),
    }


@nsight_agent.analyze.plot(
    filename=str(OUT_DIR / "09_derived_from_metrics.png"),
    metric="CountedTFLOPS",
    title="fp32 matmul: FLOP rate from instruction counters",
    ylabel="TFLOP/s (counted)",
    annotate_points=True,
)
@nsight_agent.analyze.kernel(
    configs=[(1024,), (2048,)], runs=3, metrics=METRICS, derive_metric=counted_flops
)
def matmul(n: int) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False  # keep fp32 on the FMA units (the default)
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    with nsight_agent.annotate("sgemm"):
        _ = a @ b


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    results = matmul()
    df = results.to_dataframe()
    derived = df[df["Metric"].isin(["CountedTFLOPS", "CountedOverNominal"])]
    print(derived[["n", "Metric", "AvgValue", "Unit"]].to_string(index=False))

    ratio = derived[derived["Metric"] == "CountedOverNominal"]["AvgValue"]
    if len(ratio) != 2 or not (ratio > 0).all():
        raise RuntimeError(f"expected a positive counted/nominal ratio per size, got:\n{df}")
    print(f"\nplot: {OUT_DIR / '09_derived_from_metrics.png'}")


if __name__ == "__main__":
    main()
