"""The Ray executor on two GPUs: two jobs at once take about the time of one.

A real MCP client over stdio against ``nsight-agent serve --executor ray`` with no
``--ray-address``, so the server starts a local Ray cluster over this machine's GPUs (one
``nsight_agent_ncu`` unit per GPU). In one session:

1. ``device_info`` once: the pool (nodes, GPUs, the ncu resource).
2. A warm-up ``profile_kernel`` (the first job pays the Ray worker's start), timed.
3. ``--rounds`` rounds, alternating which goes first: ONE ``profile_kernel`` alone, then TWO at
   once (the same arguments, two sources that differ by a constant, so the jobs are
   independent), the wall clock of the pair. Each run's ``where.json`` (written by the executor
   when the run folder lands) says which GPU ran it; ``load_run`` gives each config's
   ``gpu__time_duration.sum`` mean, single against pair (target: equal within noise).
4. One ``compare_variants`` of 3 variants x 2 configs: one job, so one GPU; its verdicts.
5. The timing path on the pool's GPU hosts (``method="timing"``): ``--rounds`` calls one after
   another (each a new source), two at once, and a ``compare_variants`` with a stale
   (memoising) variant; the timing path's kernel time against the ncu runs' of step 3.
6. A cancel: a ``profile_kernel`` whose setup sleeps is cancelled by the client; the run folder
   comes back marked ``cancelled`` and the next call runs on the same host (it stayed warm).
7. ``device_info`` again: each host, its GPU and the jobs it ran.

On a machine with two GPUs and ncu, from the repository root, Ray installed (the dev or
ray extra); the ``ray`` suite runs it::

    python -m bench.ray_pool --rounds 3 --json ray_pool.json

Prints one line per measurement and a summary (medians; target pair/single about 1.0).
``--dry-run`` (for a machine
without GPU or ncu) runs only ``device_info`` and one ``profile_kernel`` and prints the answers.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

METRIC = "gpu__time_duration.sum"
# @K@ differs between the calls of a pair (and between calls), so no two jobs share a source.
SOURCE = """
import torch

def setup(n, device="cuda"):
    return (torch.randn(n, device=device),)

def run(x):
    return x * @K@

def torch_mul(x):
    return torch.mul(x, @K@)

def add(x):  # x + x == x * 2.0 only for K = 2.0, which compare_variants uses
    return x + x

_memo = {}
def memo(x):  # right on the first inputs only: the timing path must call it incorrect
    if x.numel() not in _memo:
        _memo[x.numel()] = x * @K@
    return _memo[x.numel()]
"""
# A setup that sleeps: the job is cancelled while it runs.
SLOW = """
import time, torch

def setup(n, device="cuda"):
    time.sleep(300)
    return (torch.randn(n, device=device),)

def run(x):
    return x * 3.0
"""
CONFIGS = [{"n": 1 << 24}, {"n": 1 << 26}]
RUNS = 20

med = statistics.median
RESULTS: dict[str, Any] = {}
_constants = itertools.count()


def say(line: str) -> None:
    print(line, flush=True)


def source(k: float | None = None) -> str:
    """The kernel with a constant no earlier call used (or ``k``)."""
    if k is None:
        k = 2.0 + next(_constants) / 64  # exact in binary: the same kernel, another source
    return SOURCE.replace("@K@", repr(float(k)))


def _text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def where_of(runs_root: Path, run_id: str | None) -> dict[str, Any]:
    """The executor's record of which node and GPU ran the run (empty if none)."""
    path = runs_root / str(run_id) / "where.json"
    if not run_id or not path.is_file():
        return {}
    where: dict[str, Any] = json.loads(path.read_text())
    return where


def times_of(runs_root: Path, run_id: str) -> dict[str, float]:
    """Config (``n``) -> mean of gpu__time_duration.sum in ns, from the run as stored."""
    from nsight_agent.engine.pipeline import load_run

    rows = load_run(run_id, runs_root=runs_root).processed
    rows = rows[rows["Metric"] == METRIC]
    return {str(int(r["n"])): float(r["AvgValue"]) for r in rows.to_dict("records")}


def server(runs_root: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "nsight_agent", "serve", "--executor", "ray", "--runs-root", str(runs_root)],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


Call = Any  # the session's timed call_tool: (tool, args) -> (seconds, result)


async def session(rounds: int, dry_run: bool, phases: set[str]) -> None:
    runs_root = Path(tempfile.mkdtemp(prefix="ray-pool-runs-"))
    RESULTS["runs_root"] = str(runs_root)
    say(f"runs root: {runs_root}")
    async with Client(server(runs_root), read_timeout_seconds=600) as client:

        async def call(tool: str, args: dict[str, Any]) -> tuple[float, CallToolResult]:
            start = time.monotonic()
            result = await client.call_tool(tool, args)
            seconds = time.monotonic() - start
            if result.is_error and not dry_run:
                raise RuntimeError(f"{tool}: is_error: {_text(result)[:800]}")
            return seconds, result

        try:
            seconds, info = await call("device_info", {})
            content = info.structured_content or {}
            say(f"device_info ({seconds:.1f} s, error={info.is_error}):")
            say(json.dumps(content.get("pool", content), indent=1, default=str))
            RESULTS["pool"] = content.get("pool")
        except Exception:  # one phase failing must not lose the others' numbers
            say(f"phase device_info FAILED:\n{traceback.format_exc()[-2000:]}")

        if dry_run:
            args = {"source": source(), "language": "torch", "configs": CONFIGS, "runs": RUNS}
            seconds, result = await call("profile_kernel", args)
            say(f"profile_kernel ({seconds:.1f} s): is_error={result.is_error}")
            say("   " + _text(result)[:1500].replace("\n", "\n   "))
            RESULTS["dry_run"] = {"is_error": result.is_error, "text": _text(result)[:1500]}
            return

        if "pool" in phases:
            await pool_phases(call, runs_root, rounds)
        if "timing" in phases:
            await timing_phase(call, runs_root, rounds)
        if "cancel" in phases:
            await cancel_phase(client, call, runs_root)
        try:
            seconds, info = await call("device_info", {})
            pool = (info.structured_content or {}).get("pool") or {}
            RESULTS["pool_after"] = pool
            say(f"device_info after: hosts {pool.get('hosts')}, running {pool.get('running')}, "
                f"queued {pool.get('queued')}")  # fmt: skip
        except Exception:
            say(f"phase device_info after FAILED:\n{traceback.format_exc()[-2000:]}")


async def pool_phases(call: Call, runs_root: Path, rounds: int) -> None:
    """Steps 2-4: the warm-up call, single against pair rounds, one comparison."""

    async def profile() -> dict[str, Any]:
        return await profile_call(call, runs_root)

    try:
        warm = await profile()
        say(f"warm-up profile_kernel (Ray worker start): {warm['s']:.2f} s on gpu {warm['gpu']}")
        RESULTS["warmup"] = warm
    except Exception:
        say(f"phase warm-up FAILED:\n{traceback.format_exc()[-2000:]}")

    async def into(out: list[dict[str, Any]]) -> None:
        out.append(await profile())

    singles: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    RESULTS["single"], RESULTS["pair"] = singles, pairs
    for r in range(rounds):
        for side in ("single", "pair") if r % 2 == 0 else ("pair", "single"):
            try:
                if side == "single":
                    one = await profile()
                    one["times_ns"] = times_of(runs_root, one["run_id"])
                    singles.append(one)
                    say(f"round {r} single {one['s']:7.2f} s on gpu {one['gpu']}")
                    continue
                both: list[dict[str, Any]] = []
                start = time.monotonic()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(into, both)
                    tg.start_soon(into, both)
                wall = time.monotonic() - start
                for one in both:
                    one["times_ns"] = times_of(runs_root, one["run_id"])
                gpus = [one["gpu"] for one in both]
                pairs.append({"s": wall, "calls": both, "gpus": gpus})
                each = ", ".join(f"{one['s']:.2f}" for one in both)
                say(f"round {r} pair   {wall:7.2f} s (calls {each} s) on gpus {gpus}"
                    + ("" if len(set(gpus)) == 2 else "  SAME GPU"))  # fmt: skip
            except Exception:
                say(f"round {r} {side} FAILED:\n{traceback.format_exc()[-2000:]}")

    try:
        variants = [
            {"name": "run", "entry": "run"},
            {"name": "torch_mul", "entry": "torch_mul"},
            {"name": "add", "entry": "add"},
        ]
        args = {"source": source(2.0), "language": "torch", "variants": variants,
                "baseline": "run", "configs": CONFIGS, "runs": RUNS}  # fmt: skip
        seconds, result = await call("compare_variants", args)
        content = result.structured_content or {}
        run_id = content.get("run_id")
        where = where_of(runs_root, run_id)
        overall = {k: v.get("verdict") for k, v in content.get("overall", {}).items()}
        say(f"compare_variants 3 variants x 2 configs: {seconds:.2f} s, one job on node "
            f"{where.get('node')} gpu {where.get('gpu')}; verdicts {overall}")  # fmt: skip
        RESULTS["compare"] = {
            "s": seconds,
            "run_id": run_id,
            "where": where,
            "overall": overall,
        }
    except Exception:
        say(f"phase compare FAILED:\n{traceback.format_exc()[-2000:]}")


async def profile_call(call: Call, runs_root: Path, method: str = "ncu") -> dict[str, Any]:
    """One ``profile_kernel`` of a new source: seconds, run id, and the GPU and host pid that
    ran it (the run's where.json)."""
    args = {"source": source(), "language": "torch", "configs": CONFIGS, "runs": RUNS,
            "method": method}  # fmt: skip
    seconds, result = await call("profile_kernel", args)
    run_id = (result.structured_content or {}).get("run_id")
    where = where_of(runs_root, run_id)
    return {"s": seconds, "run_id": run_id, "gpu": where.get("gpu"), "pid": where.get("pid")}


async def timing_phase(call: Call, runs_root: Path, rounds: int) -> None:
    """method="timing" on the pool: one call after another, two at once, a stale variant."""
    out: dict[str, Any] = {"calls": [], "pair": None}
    RESULTS["timing"] = out

    async def timed() -> dict[str, Any]:
        one = await profile_call(call, runs_root, "timing")
        return {**one, "times_ns": times_of(runs_root, str(one["run_id"]))}

    try:
        for r in range(rounds + 1):
            one = await timed()
            out["calls"].append(one)
            say(f"timing call {r}: {one['s']:.2f} s on gpu {one['gpu']} (host pid {one['pid']})")
        both: list[dict[str, Any]] = []
        start = time.monotonic()

        async def into() -> None:
            both.append(await timed())

        async with anyio.create_task_group() as tg:
            tg.start_soon(into)
            tg.start_soon(into)
        out["pair"] = {"s": time.monotonic() - start, "gpus": [b["gpu"] for b in both]}
        say(f"two timing calls at once: {out['pair']['s']:.2f} s on gpus {out['pair']['gpus']}")
        variants = [{"name": "run", "entry": "run"}, {"name": "add", "entry": "add"},
                    {"name": "memo", "entry": "memo"}]  # fmt: skip
        args = {"source": source(2.0), "language": "torch", "variants": variants,
                "baseline": "run", "configs": CONFIGS, "runs": RUNS, "method": "timing"}  # fmt: skip
        seconds, result = await call("compare_variants", args)
        overall = {k: v.get("verdict") for k, v in
                   ((result.structured_content or {}).get("overall") or {}).items()}  # fmt: skip
        out["compare"] = {"s": seconds, "overall": overall}
        say(f"timing compare_variants 3 variants x 2 configs: {seconds:.2f} s; {overall}")
    except Exception:
        say(f"phase timing FAILED:\n{traceback.format_exc()[-2000:]}")


async def cancel_phase(client: Client, call: Call, runs_root: Path) -> None:
    """A running job cancelled by the client: its folder comes back, its host stays."""
    out: dict[str, Any] = {}
    RESULTS["cancel"] = out
    try:
        before = {d.name for d in runs_root.iterdir()}
        args = {"source": SLOW, "language": "torch", "configs": [{"n": 1024}], "runs": 1}
        start = time.monotonic()
        with anyio.move_on_after(20):
            await client.call_tool("profile_kernel", args)
        out["cancelled_after_s"] = time.monotonic() - start
        # The host stops the job, sends the folder back and starts its worker again.
        waited = time.monotonic()
        for _ in range(60):
            _, info = await call("device_info", {})
            hosts = ((info.structured_content or {}).get("pool") or {}).get("hosts") or []
            if hosts and all(h.get("warm") and h.get("state") == "idle" for h in hosts):
                break
            await anyio.sleep(0.5)
        out["hosts_warm_again_s"] = time.monotonic() - waited
        out["hosts"] = hosts
        new = [runs_root / d for d in {d.name for d in runs_root.iterdir()} - before]
        status = {d.name: json.loads((d / "status.json").read_text()).get("status")
                  for d in new if (d / "status.json").is_file()}  # fmt: skip
        pids = {where_of(runs_root, d.name).get("pid") for d in new}
        out.update(status=status, host_pids=sorted(p for p in pids if p))
        args = {"source": source(), "language": "torch", "configs": CONFIGS[:1], "runs": 3,
                "method": "timing"}  # fmt: skip
        seconds, result = await call("profile_kernel", args)
        run_id = (result.structured_content or {}).get("run_id")
        out["next"] = {"s": seconds, **where_of(runs_root, run_id)}
        say(f"cancel: hosts warm again {out['hosts_warm_again_s']:.1f} s after; runs {status}; "
            f"host pids {out['host_pids']}; the next call "
            f"{seconds:.2f} s on host pid {out['next'].get('pid')}")  # fmt: skip
    except Exception:
        say(f"phase cancel FAILED:\n{traceback.format_exc()[-2000:]}")


def summary() -> None:
    say("\n== summary (medians) ==")
    if "warmup" in RESULTS:
        say(f"warm-up profile_kernel (first job, Ray worker start): {RESULTS['warmup']['s']:.2f} s")
    singles, pairs = RESULTS.get("single") or [], RESULTS.get("pair") or []
    if singles and pairs:
        one, two = med(s["s"] for s in singles), med(p["s"] for p in pairs)
        say(f"one profile_kernel alone {one:.2f} s; two at once {two:.2f} s; "
            f"pair/single {two / one:.2f} (target about 1.0; 2.0 = serialised)")  # fmt: skip
        RESULTS["ratio_pair_single"] = two / one
    if pairs:
        apart = sum(1 for p in pairs if len(set(p["gpus"])) == 2 and None not in p["gpus"])
        say(f"pairs whose two calls ran on different GPUs: {apart}/{len(pairs)}")
        RESULTS["pairs_on_two_gpus"] = [apart, len(pairs)]
    alone = [s.get("times_ns", {}) for s in singles]
    together = [c.get("times_ns", {}) for p in pairs for c in p["calls"]]
    diffs = {}
    for n in sorted({n for t in alone + together for n in t}, key=int):
        a = [t[n] for t in alone if n in t]
        b = [t[n] for t in together if n in t]
        if a and b:
            rel = (med(b) - med(a)) / med(a) * 100
            spread = (max(a) - min(a)) / med(a) * 100
            diffs[n] = {"single_ns": med(a), "pair_ns": med(b), "rel_diff_pct": rel}
            say(f"{METRIC} n={n}: alone {med(a) / 1e3:.2f} us, in a pair {med(b) / 1e3:.2f} us, "
                f"{rel:+.2f} % (spread of the singles {spread:.2f} %; target: equal within noise)")  # fmt: skip
    RESULTS["kernel_time"] = diffs
    timing_summary()
    if "compare" in RESULTS:
        c = RESULTS["compare"]
        say(
            f"compare_variants: {c['s']:.2f} s on gpu {c['where'].get('gpu')}; verdicts {c['overall']}"
        )


def timing_summary() -> None:
    timing = RESULTS.get("timing") or {}
    calls = timing.get("calls") or []
    if len(calls) > 1:
        warm = med(c["s"] for c in calls[1:])
        say(f"timing on the pool: first call {calls[0]['s']:.2f} s, then median {warm:.2f} s "
            f"(target <= 1 s warm)")  # fmt: skip
        RESULTS["timing_warm_median_s"] = warm
    ncu = [s.get("times_ns", {}) for s in RESULTS.get("single") or []]
    for n in sorted({n for c in calls for n in c.get("times_ns", {})}, key=int):
        a = [c["times_ns"][n] for c in calls if n in c.get("times_ns", {})]
        b = [t[n] for t in ncu if n in t]
        if a and b:
            rel = (med(a) - med(b)) / med(b) * 100
            say(f"n={n}: timing path {med(a) / 1e3:.2f} us, ncu {med(b) / 1e3:.2f} us, "
                f"{rel:+.2f} %")  # fmt: skip
    if timing.get("pair"):
        say(
            f"two timing calls at once: {timing['pair']['s']:.2f} s on gpus {timing['pair']['gpus']}"
        )
    if timing.get("compare"):
        say(f"timing compare_variants: {timing['compare']}")
    if RESULTS.get("cancel"):
        say(f"cancel: {RESULTS['cancel']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write every measurement here")
    parser.add_argument("--phases", default="pool,timing,cancel", help="of pool,timing,cancel")
    parser.add_argument("--dry-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    start = time.monotonic()
    try:
        anyio.run(session, args.rounds, args.dry_run, set(args.phases.split(",")))
    except Exception:  # keep what was measured before the session broke
        say(f"session FAILED:\n{traceback.format_exc()[-2000:]}")
    say(f"-- session done at {time.monotonic() - start:.0f} s")
    if not args.dry_run:
        summary()
    if args.json:
        args.json.write_text(json.dumps(RESULTS, indent=1, default=str))


if __name__ == "__main__":
    main()
