"""Variants written to game compare_variants, through a real MCP client, on both methods,
and the timing path against ncu on kernels from about 2 us to 5 ms.

Phases (one run, on a machine with a GPU and ncu, from the repository root; the
``adversarial`` suite runs the first)::

    python3 -m bench.adversarial --json adversarial.json

1. suite: ``tests/fixtures/adversarial/softmax_games.py`` (softmax, 4096 rows, 1000 and 4096
   columns, 10 runs; its setup seeds a generator of its own) through ``compare_variants`` with
   method ncu and method timing; then again with ``options.vary_inputs=false`` (the inputs no
   longer change, so only the floor and storage checks stand between a cache and a speedup).
   Each variant's overall verdict against the verdicts it is allowed (``REQUIRED``).
2. rows: four variants, one raising and one launching no kernel: two rows with their verdicts,
   two compared (both methods).
3. agreement: ``profile_kernel`` with method timing (median) against method ncu
   (``gpu__time_duration.sum`` mean) on an elementwise scale from 2^18 to 2^28 floats and a
   matmul; the ratio per size; and the warm timing call's cost.
4. honest: honest variants (a rewrite, a joined side stream, small in-cache sizes) on both
   methods: how many are flagged suspect (false positives of the plausibility checks).

Prints a table per phase; ``--json`` writes every number.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
SOURCE = (ROOT / "tests" / "fixtures" / "adversarial" / "softmax_games.py").read_text()
CONFIGS = [{"rows": 4096, "cols": 1000}, {"rows": 4096, "cols": 4096}]
# The verdicts each variant may get overall (the tests read the same file).
_TABLE = json.loads((ROOT / "tests" / "fixtures" / "adversarial" / "required.json").read_text())
REQUIRED: dict[str, set[str]] = {k: set(v) for k, v in _TABLE["vary"].items()}
REQUIRED_FIXED: dict[str, set[str]] = {k: set(v) for k, v in _TABLE["fixed"].items()}
RESULTS: dict[str, Any] = {}


def server() -> StdioServerParameters:
    # The SDK gives the server a minimal environment unless told: pass ours (PYTHONPATH).
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return StdioServerParameters(
        command=sys.executable, args=["-m", "nsight_agent", "serve"], env=env
    )


async def call(client: Any, tool: str, args: dict[str, Any]) -> tuple[dict[str, Any], float]:
    start = time.monotonic()
    result = await client.call_tool(tool, args)
    took = time.monotonic() - start
    if result.is_error:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        return {"error": text[:400]}, took
    return dict(result.structured_content or {}), took


def verdicts(answer: dict[str, Any]) -> dict[str, str]:
    return {k: v["verdict"] for k, v in answer.get("overall", {}).items()}


async def suite(
    client: Any, names: list[str], required: dict[str, set[str]], tag: str, **options: Any
) -> None:
    for method in ("ncu", "timing"):
        args = {
            "source": SOURCE,
            "language": "torch",
            "variants": [
                {"name": "run", "entry": "run"},
                *({"name": n, "entry": n} for n in names),
            ],
            "configs": CONFIGS,
            "runs": 10,
            "method": method,
            "limit": 4,
        }
        if options:
            args["options"] = options
        answer, took = await call(client, "compare_variants", args)
        got = verdicts(answer)
        rows = []
        for name in names:
            ok = got.get(name) in required[name]
            why = next(
                (
                    c["variants"][name].get("check")
                    for c in answer.get("configs", [])
                    if name in c["variants"] and c["variants"][name].get("check")
                ),
                None,
            )
            rows.append(
                {
                    "variant": name,
                    "verdict": got.get(name),
                    "required": sorted(required[name]),
                    "ok": ok,
                    "why": why,
                }
            )
            print(
                f"{tag:6s} {method:6s} {name:22s} {got.get(name)!s:13s} {'OK' if ok else 'WRONG'}  {(why or '')[:90]}"
            )
        if "error" in answer:
            print(f"{tag} {method}: ERROR {answer['error']}")
        RESULTS.setdefault(tag, {})[method] = {
            "rows": rows,
            "seconds": took,
            "error": answer.get("error"),
        }


async def bad_rows(client: Any) -> None:
    for method in ("ncu", "timing"):
        args = {
            "source": SOURCE,
            "language": "torch",
            "variants": [{"name": n, "entry": n} for n in ("run", "honest", "raises", "no_kernel")],
            "configs": CONFIGS[:1],
            "runs": 5,
            "method": method,
        }
        answer, took = await call(client, "compare_variants", args)
        print(f"rows   {method:6s} {verdicts(answer)} ({took:.1f} s) {answer.get('error', '')}")
        RESULTS.setdefault("rows", {})[method] = {
            "overall": verdicts(answer),
            "error": answer.get("error"),
        }


SCALE = """
import torch

def setup(n, kind, device="cuda"):
    if kind == "matmul":
        return (torch.randn(n, n, device=device), torch.randn(n, n, device=device))
    return (torch.randn(n, device=device),)

def run(*xs):
    return xs[0] @ xs[1] if len(xs) == 2 else xs[0] * 2.0
"""


def agreement_rows() -> list[dict[str, Any]]:
    """Timing path (median of its samples) against ncu (median of the per-run
    gpu__time_duration.sum), the same request through the engine, in this process."""
    import tempfile

    from nsight_agent.engine import pipeline
    from nsight_agent.engine.worker.pool import WorkerPool
    from nsight_agent.request import TIME_METRIC, ProfileRequest

    configs = [{"n": 1 << k, "kind": "scale"} for k in (18, 20, 22, 24, 26, 28)]
    configs += [{"n": n, "kind": "matmul"} for n in (2048, 4096, 8192)]
    req = ProfileRequest.model_validate(
        {"source": SCALE, "language": "torch", "configs": configs, "runs": 15, "warmup": 3}
    )
    with tempfile.TemporaryDirectory() as tmp, WorkerPool() as pool:
        timed = pipeline.time_request(req, pool, runs_root=Path(tmp)).processed
        raw = pipeline.profile(req, runs_root=Path(tmp)).raw
    raw = raw[raw["Metric"] == TIME_METRIC]
    rows = []
    for t_row in timed.to_dict("records"):
        mine = raw[(raw["kind"] == t_row["kind"]) & (raw["n"] == t_row["n"])]
        n_med = float(statistics.median(mine["Value"]))
        t_med = float(t_row["MedianValue"])
        label = f"{t_row['kind']} n={t_row['n']}"
        rows.append(
            {
                "label": label,
                "ncu_ns": n_med,
                "timing_ns": t_med,
                "ratio": t_med / n_med,
                "method": t_row.get("Method"),
            }
        )
        print(
            f"agree  {label:22s} ncu {n_med / 1e3:10.2f} us  timing {t_med / 1e3:10.2f} us  x{t_med / n_med:.3f}  ({t_row.get('Method')})"
        )
    return rows


async def agreement(client: Any) -> None:
    rows = await asyncio.to_thread(agreement_rows)
    warm = []
    one = {
        "source": SCALE,
        "language": "torch",
        "configs": [{"n": 1 << 20, "kind": "scale"}],
        "runs": 10,
        "method": "timing",
    }
    for _ in range(6):
        _, took = await call(client, "profile_kernel", one)
        warm.append(took)
    print(
        f"warm timing call: median of the last 5 {statistics.median(warm[1:]):.3f} s ({', '.join(f'{w:.3f}' for w in warm)})"
    )
    RESULTS["agreement"] = {"rows": rows, "warm_call_s": warm}


async def honest(client: Any) -> None:
    flagged, total = 0, 0
    for method in ("ncu", "timing"):
        for configs in (CONFIGS, [{"rows": 256, "cols": 1000}, {"rows": 64, "cols": 4096}]):
            args = {
                "source": SOURCE,
                "language": "torch",
                "variants": [
                    {"name": n, "entry": n}
                    for n in ("run", "honest", "side_stream_joined", "persisting_l2")
                ],
                "configs": configs,
                "runs": 10,
                "method": method,
            }
            answer, _ = await call(client, "compare_variants", args)
            for name in ("honest", "side_stream_joined", "persisting_l2"):
                for c in answer.get("configs", []):
                    total += 1
                    flagged += c["variants"][name]["verdict"] in (
                        "suspect",
                        "incorrect",
                        "error",
                        "no_kernel",
                    )
            print(f"honest {method:6s} {json.dumps(configs)} {verdicts(answer)}")
    print(f"honest variants flagged: {flagged} of {total} (variant, config) rows")
    RESULTS["honest"] = {"flagged": flagged, "rows": total}


async def main(phases: list[str]) -> None:
    async with Client(server(), read_timeout_seconds=900) as client:
        if "suite" in phases:
            await suite(client, list(REQUIRED), REQUIRED, "vary")
            await suite(client, list(REQUIRED_FIXED), REQUIRED_FIXED, "fixed", vary_inputs=False)
        if "rows" in phases:
            await bad_rows(client)
        if "agreement" in phases:
            await agreement(client)
        if "honest" in phases:
            await honest(client)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phases", default="suite,rows,agreement,honest")
    parser.add_argument("--json", type=Path)
    ns = parser.parse_args()
    asyncio.run(main(ns.phases.split(",")))
    if ns.json:
        ns.json.write_text(json.dumps(RESULTS, indent=1, default=str))
