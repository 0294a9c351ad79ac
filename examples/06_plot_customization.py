"""06 - plot customisation: titles, labels, bars, aggregates and a styling callback.

One profiling run, two plots: ``analyze.plot`` returns the results it was given, so two
``plot`` decorators can be stacked above one ``analyze.kernel`` and each draws its own
figure from the same measurements.

Shows:
- ``title``, ``ylabel``, ``annotate_points=True`` (values written next to the points).
- ``plot_type="bar"``: grouped bars, one per annotation, instead of lines.
- ``show_aggregate="geomean"`` / ``"avg"``: an extra slot after the configs with the
  geometric mean or the mean of each annotation.
- ``plot_width`` / ``plot_height`` (inches per panel) and ``plot_callback``, a function that
  receives the matplotlib Figure before it is saved (here: a bold title, a legend title,
  thicker lines and a footnote).

Run::

    python examples/06_plot_customization.py

The plots go to ``06_bar_chart.png`` and ``06_callback.png`` in the current directory, or in
the folder named by the environment variable ``NSIGHT_AGENT_EXAMPLE_OUT``.
"""

import os
from pathlib import Path
from typing import Any

import torch

import nsight_agent

OUT_DIR = Path(os.environ.get("NSIGHT_AGENT_EXAMPLE_OUT", "."))


def tflops(time_ns: float, n: int) -> dict[str, tuple[float, str]]:
    return {"TFLOPS": (2.0 * n**3 / (time_ns * 1e-9) / 1e12, "TFLOP/s")}


def restyle(fig: Any) -> None:
    """Called with the matplotlib Figure once it is drawn, before it is saved."""
    fig.suptitle("fp32 vs bf16 matmul", fontsize=14, fontweight="bold")
    for ax in fig.get_axes():
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(loc="upper left", title="dtype")
        for line in ax.get_lines():
            line.set_linewidth(2.5)
            line.set_markersize(9)
    fig.text(0.99, 0.01, "measured with nsight_agent", ha="right", fontsize=8, alpha=0.6)


@nsight_agent.analyze.plot(
    filename=str(OUT_DIR / "06_bar_chart.png"),
    metric="TFLOPS",
    title="matmul throughput by dtype",
    ylabel="TFLOP/s",
    plot_type="bar",
    annotate_points=True,
    show_aggregate="geomean",
)
@nsight_agent.analyze.plot(
    filename=str(OUT_DIR / "06_callback.png"),
    metric="TFLOPS",
    ylabel="TFLOP/s",
    show_aggregate="avg",
    plot_width=8,
    plot_height=5,
    plot_callback=restyle,
)
@nsight_agent.analyze.kernel(configs=[(1024,), (2048,), (4096,)], runs=5, derive_metric=tflops)
def matmul(n: int) -> None:
    a32 = torch.randn(n, n, device="cuda")
    b32 = torch.randn(n, n, device="cuda")
    a16, b16 = a32.to(torch.bfloat16), b32.to(torch.bfloat16)
    with nsight_agent.annotate("fp32"):
        _ = a32 @ b32
    with nsight_agent.annotate("bf16"):
        _ = a16 @ b16


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    results = matmul()
    df = results.to_dataframe()
    rate = df[df["Metric"] == "TFLOPS"]
    print(rate.pivot_table(index="n", columns="Annotation", values="AvgValue").round(1))

    for name in ("06_bar_chart.png", "06_callback.png"):
        if not (OUT_DIR / name).is_file():
            raise RuntimeError(f"plot {OUT_DIR / name} was not written")
        print(f"plot: {OUT_DIR / name}")


if __name__ == "__main__":
    main()
