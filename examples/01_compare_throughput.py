"""01 - compare two implementations on a DRAM-throughput metric.

Both implementations compute ``out = 2 * src`` for a square fp32 matrix. The first reads
``src`` row by row (contiguous, coalesced loads); the second reads ``src.t()``, so neighbouring
threads load elements one row apart (strided loads). Nsight Compute's
``dram__throughput.avg.pct_of_peak_sustained_elapsed`` shows how much of the DRAM bandwidth
each one manages to use.

Shows:
- ``metrics=[...]`` with an ncu metric instead of the default kernel time.
- ``nsight_agent.annotate`` used as a function decorator: every call of the decorated helper
  is one annotated range.
- Several annotations in one profiled function, plotted as one line each.
- ``print_data=True`` on ``analyze.plot`` to print the plotted table.

Run::

    python examples/01_compare_throughput.py

The plot goes to ``01_compare_throughput.png`` in the current directory, or in the folder
named by the environment variable ``NSIGHT_AGENT_EXAMPLE_OUT``.
"""

import os
from pathlib import Path

import torch

import nsight_agent

OUT_DIR = Path(os.environ.get("NSIGHT_AGENT_EXAMPLE_OUT", "."))
METRIC = "dram__throughput.avg.pct_of_peak_sustained_elapsed"


@nsight_agent.annotate("contiguous")
def scale_contiguous(src: torch.Tensor, out: torch.Tensor) -> None:
    torch.mul(src, 2.0, out=out)


@nsight_agent.annotate("strided")
def scale_strided(src: torch.Tensor, out: torch.Tensor) -> None:
    # `out` is contiguous and fixes the iteration order, so the reads of the transposed
    # view jump `n` elements between neighbouring threads.
    torch.mul(src.t(), 2.0, out=out)


@nsight_agent.analyze.plot(
    filename=str(OUT_DIR / "01_compare_throughput.png"),
    title="out = 2 * src: contiguous vs strided reads",
    ylabel="DRAM throughput (% of peak)",
    print_data=True,
)
@nsight_agent.analyze.kernel(configs=[(1024,), (2048,), (4096,)], runs=5, metrics=[METRIC])
def scaled_copy(n: int) -> None:
    src = torch.randn(n, n, device="cuda")
    out = torch.empty(n, n, device="cuda")
    scale_contiguous(src, out)
    scale_strided(src, out)


def main() -> None:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    results = scaled_copy()
    df = results.to_dataframe()
    table = df.pivot_table(index="n", columns="Annotation", values="AvgValue")
    print()
    for n, row in table.iterrows():
        print(
            f"n={n}: contiguous {row['contiguous']:.1f} %, strided {row['strided']:.1f} % "
            f"of peak DRAM throughput ({row['contiguous'] / row['strided']:.1f}x)"
        )

    if set(df["Annotation"]) != {"contiguous", "strided"}:
        raise RuntimeError(f"expected both annotations, got {sorted(set(df['Annotation']))}")
    print(f"\nplot: {OUT_DIR / '01_compare_throughput.png'}")


if __name__ == "__main__":
    main()
