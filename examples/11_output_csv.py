"""11 - write the results as CSV files and read them back with pandas.

Shows:
- ``output_prefix``: a path prefix for everything a profiling call writes (the ncu report,
  its logs and, here, the CSVs). A prefix ending in a folder name plus ``/`` puts the files
  in that folder; anything after the last ``/`` starts each file name.
- ``output_csv=True``: the raw per-run data and the aggregated table are written as CSV.
- Reading the CSVs back with ``pandas.read_csv`` and listing their columns.

Run::

    python examples/11_output_csv.py

The files go to ``11_output_csv/`` in the current directory, or in the folder named by
the environment variable ``NSIGHT_AGENT_EXAMPLE_OUT``.
"""

import os
from pathlib import Path

import pandas as pd
import torch

import nsight_agent

OUT_DIR = Path(os.environ.get("NSIGHT_AGENT_EXAMPLE_OUT", "."))
CSV_DIR = OUT_DIR / "11_output_csv"
PREFIX = "matmul_"


@nsight_agent.analyze.kernel(
    configs=[(1024,), (2048,)],
    runs=3,
    output_prefix=f"{CSV_DIR}/{PREFIX}",
    output_csv=True,
)
def matmul(n: int) -> None:
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    a16, b16 = a.to(torch.float16), b.to(torch.float16)
    with nsight_agent.annotate("fp32"):
        _ = a @ b
    with nsight_agent.annotate("fp16"):
        _ = a16 @ b16


def main() -> None:
    CSV_DIR.mkdir(parents=True, exist_ok=True)
    for old in CSV_DIR.glob(f"{PREFIX}*.csv"):  # start clean: files from earlier runs
        old.unlink()

    results = matmul()
    print(results.to_dataframe()[["Annotation", "n", "AvgValue", "NumRuns"]].to_string(index=False))

    csv_files = sorted(CSV_DIR.glob(f"{PREFIX}*.csv"))
    if not csv_files:
        raise RuntimeError(f"output_csv=True wrote no {PREFIX}*.csv file in {CSV_DIR}")
    columns_seen: set[str] = set()
    for path in csv_files:
        df = pd.read_csv(path)
        columns_seen.update(df.columns)
        print(f"\n{path} ({len(df)} rows)")
        print("  columns:", ", ".join(df.columns))
        shown = [c for c in ("Annotation", "n", "Metric", "Value", "AvgValue") if c in df.columns]
        print(df[shown].head(4).to_string(index=False))

    if "AvgValue" not in columns_seen:
        raise RuntimeError("no CSV holds the aggregated table (an AvgValue column)")


if __name__ == "__main__":
    main()
