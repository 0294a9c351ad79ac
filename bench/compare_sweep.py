"""Side by side with nsight-python 0.9.6 in one run, on one GPU: the same fp16 matmul size
sweep profiled by each, alternating, R rounds. Reports per size our AvgValue of
gpu__time_duration.sum against the peer's (agreement within 3 % is the target), whether the
DataFrame columns are the same, and the wall time of each tool with the ratio.

    python -m bench.compare_sweep OUT_DIR [ROUNDS]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

TOOLS = {"nsight-agent": "bench.sweep_ours", "nsight-python-0.9.6": "bench.sweep_peer"}


def run(module: str, csv: Path) -> float:
    start = time.monotonic()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]),
    }
    subprocess.run([sys.executable, "-m", module, str(csv)], check=True, timeout=900, env=env)
    return time.monotonic() - start


def main() -> int:
    out = Path(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    out.mkdir(parents=True, exist_ok=True)
    walls: dict[str, list[float]] = {t: [] for t in TOOLS}
    frames: dict[str, list[pd.DataFrame]] = {t: [] for t in TOOLS}
    for r in range(rounds):
        order = list(TOOLS) if r % 2 == 0 else list(reversed(TOOLS))  # alternate who goes first
        for tool in order:
            csv = out / f"{tool}-round{r}.csv"
            walls[tool].append(run(TOOLS[tool], csv))
            frames[tool].append(pd.read_csv(csv))
    ours, peer = frames["nsight-agent"][-1], frames["nsight-python-0.9.6"][-1]
    rows = []
    for n in sorted(set(ours["n"])):
        a = pd.concat(f[f["n"] == n] for f in frames["nsight-agent"])["AvgValue"].mean()
        b = pd.concat(f[f["n"] == n] for f in frames["nsight-python-0.9.6"])["AvgValue"].mean()
        rows.append({"n": int(n), "ours_ns": a, "peer_ns": b, "diff_pct": 100 * (a - b) / b})
    result = {
        "rounds": rounds,
        "sizes": rows,
        "max_abs_diff_pct": max(abs(r["diff_pct"]) for r in rows),
        "same_columns": list(ours.columns) == list(peer.columns),
        "ours_columns": list(ours.columns),
        "peer_columns": list(peer.columns),
        "wall_s": {t: w for t, w in walls.items()},
        "wall_ratio_peer_over_ours": sum(walls["nsight-python-0.9.6"]) / sum(walls["nsight-agent"]),
    }
    (out / "compare_sweep.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
