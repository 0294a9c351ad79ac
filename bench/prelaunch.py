"""Pre-launched ncu targets on a GPU, side by side in one run, alternating per round.

Two ``nsight-agent serve`` over stdio, each driven by a real MCP client: one with
``NSIGHT_AGENT_TARGETS=0`` (every ncu run cold, as before) and one with ``NSIGHT_AGENT_TARGETS=1``.
First, before anything else runs ncu, the pre-launched server's first ``profile_kernel``,
called as soon as its client has connected (the server warms its first target and runs ncu
once at start, and answers once it is ready, within ``NSIGHT_AGENT_WARM_WAIT_S``): the
connect's seconds, the warm-up's own ncu run and the steps its target stamped are kept
beside it. Per round, in alternating order:

  floor        python + torch + one kernel under ncu, one metric (the raw wall to beat)
  cold         profile_kernel of that kernel (one config, one run) on the cold server
  prelaunched  the same call on the other server, once its slot has a target ready
  triton       profile_kernel of that Triton kernel on the second server, pre-launched (the
               issue's denominator: diagnose against a profile of the same kernel)
  diagnose     diagnose_kernel from source of a Triton kernel on the second server, once its
               slot has a target ready (plain: engine/collection/collect/plain.py), and the
               path its run took (get_run)

Then once: a burst of 10 profile_kernel calls from one client to the second server, back to
back, the pool replenishing between them (median; how many went pre-launched).

``--by-name sections tables``: a diagnose side per choice, each on its own server
(``NSIGHT_AGENT_DIAGNOSE_PASS``: every section, or the memory tables' counters by name), its
headline beside the default's (every section the checks read only counters of, by name).
``--budget-s S``: then a diagnosis within S seconds. ``--peer-examples DIR``: then, in the
same run, nsight-python 0.9.6's examples against ours (``bench.fast_loop``).

``--sections``: then, on the pre-launched server, what each section a diagnosis reads costs
on a target: the Triton kernel profiled as ``diagnose_kernel`` collects it
(one warm-up, one run, its metrics) with no section, the first pass's four, all ten, all ten
but one (each in turn), then the one pass with the tables or every counter section by name,
each ncu stage's seconds from the run's status record.

Prints one line per measurement and, at the end, a JSON with every time, the medians, the
ratios to the floor and the collection path of each call; ``--out DIR`` also writes it to
DIR/prelaunch.json. On a machine with a GPU and ncu, from the repository root (the
``prelaunch`` suite runs 2 rounds)::

    python3 -m bench.prelaunch --rounds 3 --out DIR
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from bench import results
from bench.probes import attach_time
from nsight_agent.diagnose import checks_memory as cm
from nsight_agent.judge.builds import stage_seconds_of
from nsight_agent.request import TIME_METRIC
from nsight_agent.service.diagnose import (
    FIRST_PASS_METRICS,
    FIRST_PASS_SECTIONS,
    ONE_PASS_CHOICES,
    ONE_PASS_SECTIONS,
    PASS_ENV,
    one_pass,
)

# The raw floor's kernel (x * 2.0 on 2^24 floats) as a profile_kernel source.
TORCH = """
import torch

def setup(n, device="cuda"):
    return (torch.ones(n, device=device),)

def run(x):
    return x * 2.0
"""
TRITON = """
import torch
import triton
import triton.language as tl

@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)

def setup(n, device="cuda"):
    return (torch.randn(n, device=device),)

def run(x):
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out
"""
ONE = [{"n": 1 << 24}]
PROFILE = {"source": TORCH, "language": "torch", "configs": ONE, "runs": 1, "method": "ncu"}
PROFILE_TRITON = {
    "source": TRITON,
    "language": "triton",
    "configs": ONE,
    "runs": 1,
    "method": "ncu",
}
DIAGNOSE = {"source": TRITON, "language": "triton", "configs": ONE}
FLOOR = (
    "import torch; x = torch.ones(1 << 24, device='cuda'); torch.cuda.synchronize(); "
    "y = x * 2.0; torch.cuda.synchronize()"
)
READY_WAIT_S = 60.0
med = statistics.median


def say(line: str) -> None:
    print(line, flush=True)


def raw_floor() -> float:
    ncu = shutil.which("ncu") or "ncu"
    cmd = [ncu, "--metrics", "gpu__time_duration.sum", "--target-processes", "all"]
    start = time.monotonic()
    proc = subprocess.run([*cmd, sys.executable, "-c", FLOOR], capture_output=True, text=True)
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        raise RuntimeError(f"raw floor failed: {proc.stderr[-500:]}")
    return seconds


def _text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


class Server:
    """One stdio server's client, named for the lines printed."""

    def __init__(self, client: Client, name: str, runs: Path | None = None) -> None:
        self.client = client
        self.name = name
        self.runs = runs

    def stages(self, answer: dict[str, Any]) -> dict[str, Any]:
        """Each run an answer names in its passes ("one pass (run X): ..."), or its own run,
        with its wall seconds by stage from the run's status record."""
        found: dict[str, Any] = {}
        if answer.get("run_id") and not answer.get("passes") and self.runs is not None:
            found["run"] = stage_seconds_of(self.runs / str(answer["run_id"]))
        for said in answer.get("passes") or []:
            match = re.search(r"\(run ([\w-]+)\)", str(said))
            if match and self.runs is not None:
                found[str(said).split(" (run")[0]] = stage_seconds_of(self.runs / match.group(1))
        return found

    async def call(self, tool: str, args: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        start = time.monotonic()
        result = await self.client.call_tool(tool, args)
        seconds = time.monotonic() - start
        if result.is_error:
            raise RuntimeError(f"{self.name} {tool}: {_text(result)[:800]}")
        return seconds, dict(result.structured_content or {})

    async def first_slot(self) -> dict[str, Any]:
        """The first slot's row of device_info's pool."""
        _, info = await self.call("device_info", {})
        return dict(((info.get("pool") or {}).get("slots") or [{}])[0])

    async def targets(self) -> str:
        """The first slot's targets as device_info shows them ("1 ready", "off: ...")."""
        return str((await self.first_slot()).get("targets") or "")

    async def wait_ready(self) -> float:
        """Seconds until the slot has a ready target; raises past READY_WAIT_S or when off."""
        start = time.monotonic()
        while True:
            state = await self.targets()
            if state.split(" ")[0].isdigit() and int(state.split(" ")[0]) > 0:
                return time.monotonic() - start
            if state.startswith("off") or time.monotonic() - start > READY_WAIT_S:
                raise RuntimeError(f"{self.name}: no target ready ({state!r})")
            await anyio.sleep(0.25)


def target_stamps() -> tuple[dict[str, str], Path]:
    """A server environment whose pre-launched targets append their steps to a file (the
    attach probe's sitecustomize, first on their path), and that file."""
    site = Path(tempfile.mkdtemp(prefix="prelaunch-site-"))
    (site / "sitecustomize.py").write_text(attach_time.SITECUSTOMIZE)
    stamped = site / "events.jsonl"
    path = [str(site), os.getcwd(), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {attach_time.EVENTS_ENV: str(stamped), "PYTHONPATH": os.pathsep.join(path)}, stamped


def stamps_since(stamped: Path, since: float) -> list[dict[str, Any]]:
    """The targets' steps stamped since ``since`` (wall clock), in seconds after it."""
    lines = stamped.read_text().splitlines() if stamped.exists() else []
    return attach_time.relative([json.loads(line) for line in lines if line.strip()], since)


@contextlib.asynccontextmanager
async def server(name: str, targets: str, **extra_env: str) -> AsyncIterator[Server]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NSIGHT_AGENT_TARGETS": targets, **extra_env}
    runs = tempfile.mkdtemp(prefix=f"prelaunch-{name}-")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nsight_agent", "serve", "--runs-root", runs],
        env=env,
    )
    async with Client(params, read_timeout_seconds=600) as client:
        yield Server(client, name, Path(runs))


async def measure(
    rounds: int, budget_s: float | None = None, by_name: tuple[str, ...] = ()
) -> dict[str, Any]:
    sides: tuple[str, ...] = ("floor", "cold", "prelaunched", "triton", "diagnose")
    sides += tuple(f"diagnose_{choice}" for choice in by_name)
    times: dict[str, list[float]] = {k: [] for k in sides}
    paths: dict[str, list[str]] = {k: [] for k in (*sides[1:], "burst")}
    out: dict[str, Any] = {"times": times, "paths": paths}
    async with contextlib.AsyncExitStack() as stack:
        # A server's first profile_kernel, called as soon as the client has connected (the
        # server warms its first target at start): the first ncu work on the machine when the
        # suite runs first on a fresh one, as a user's first server meets it.
        # Its connect (process start to initialize answered) holds the warm-up it waits for,
        # which also pays the machine's first ncu run (its seconds from device_info).
        # Its targets stamp their steps (the attach probe's sitecustomize): the first call's
        # and a later one's, set side by side, say in which step the first one's seconds go.
        stamps, stamped = target_stamps()
        connecting = time.monotonic()
        warm = await stack.enter_async_context(server("prelaunched", "1", **stamps))
        connect_s = round(time.monotonic() - connecting, 3)
        slot = await warm.first_slot()  # the warm-up's first ncu run and throwaway profile
        stamped.write_text("")
        called_at = time.time()
        seconds, answer = await warm.call("profile_kernel", PROFILE)
        out["first_call"] = {
            "seconds": round(seconds, 3),
            "path": answer.get("collection"),
            "connect_s": connect_s,
            "stages": warm.stages(answer),  # where a first call's extra seconds go
            "warm_up_first_ncu": slot.get("first_ncu"),
            "warm_up_first_profile": slot.get("first_profile"),
            "target_events": stamps_since(stamped, called_at),
        }
        say(f"prelaunched server's first call {seconds:.2f} s ({answer.get('collection')})")
        cold = await stack.enter_async_context(server("cold", "0"))
        # A server per by-name choice: its one pass asks for those sections' counters by name.
        diagnosing = {"diagnose": warm}
        for choice in by_name:
            named = server(choice, "1", **{PASS_ENV: choice})
            diagnosing[f"diagnose_{choice}"] = await stack.enter_async_context(named)
        # Warm them: the worker, the CUDA caches; with targets, the first profile job starts
        # the slot's targets.
        for s in dict.fromkeys((cold, *diagnosing.values())):
            if s is warm:
                continue
            seconds, answer = await s.call("profile_kernel", PROFILE)
            say(f"{s.name} warm-up call {seconds:.2f} s ({answer.get('collection')})")
        out["first_ready_s"] = await warm.wait_ready()
        say(f"first target ready {out['first_ready_s']:.2f} s after the warm-up call")
        for r in range(rounds):
            for side in sides if r % 2 == 0 else sides[::-1]:
                if side == "floor":
                    seconds = await anyio.to_thread.run_sync(raw_floor)
                    path = ""
                elif side.startswith("diagnose"):
                    s = diagnosing[side]
                    await s.wait_ready()
                    seconds, answer = await s.call("diagnose_kernel", DIAGNOSE)
                    _, run = await s.call("get_run", {"run_id": answer.get("run_id")})
                    path = str(run.get("collection"))
                    paths[side].append(path)
                    # where a diagnosis's seconds go: its runs' stages (status.json)
                    out.setdefault(f"{side}_stages", []).append(s.stages(answer))
                    out.setdefault(f"{side}_headlines", []).append(headline(answer))
                else:
                    s = cold if side == "cold" else warm
                    if side != "cold":
                        await warm.wait_ready()
                    args = PROFILE_TRITON if side == "triton" else PROFILE
                    stamped.write_text("")
                    called_at = time.time()
                    seconds, answer = await s.call("profile_kernel", args)
                    if side == "prelaunched" and r == 0:  # a later call's steps, to compare
                        out["later_target_events"] = stamps_since(stamped, called_at)
                    path = str(answer.get("collection"))
                    paths[side].append(path)
                    out.setdefault(f"{side}_stages", []).append(s.stages(answer))
                times[side].append(seconds)
                say(f"round {r} {side:12s} {seconds:7.3f} s {path}")
        if budget_s:  # diagnose_kernel within a budget, on the same warm server
            await warm.wait_ready()
            args = {**DIAGNOSE, "options": {"budget_s": budget_s}}
            seconds, answer = await warm.call("diagnose_kernel", args)
            out["budget"] = {
                "budget_s": budget_s,
                "seconds": round(seconds, 3),
                "said": answer.get("budget"),
            }
            out["budget"]["headline"] = headline(answer)
            say(f"diagnose within {budget_s} s: {seconds:.3f} s; {answer.get('budget')}")
        await warm.wait_ready()
        burst_start = time.monotonic()
        burst: list[float] = []
        for i in range(10):
            seconds, answer = await warm.call("profile_kernel", PROFILE)
            burst.append(seconds)
            paths["burst"].append(str(answer.get("collection")))
            say(f"burst {i} {seconds:7.3f} s {answer.get('collection')}")
        times["burst"] = burst
        out["burst_total_s"] = time.monotonic() - burst_start
    return out


DRAM = [TIME_METRIC, *cm.DRAM_RW]


def headline(answer: dict[str, Any]) -> str | None:
    """The first diagnosed kernel's headline (does another collection read the same?)."""
    first = (answer.get("kernels") or [{}])[0]
    return (first.get("diagnosis") or {}).get("headline")


def section_sets() -> list[tuple[str, list[str], list[str]]]:
    """(label, metrics, sections): none, the first pass, all, all without each one; then
    what the counters cost: the time alone, with DRAM bytes, and all but the memory tables
    with the tables' metrics by name in their place."""
    m, every = FIRST_PASS_METRICS, list(ONE_PASS_SECTIONS)  # every section a diagnosis reads
    sets = [("none", m, []), ("first pass", m, FIRST_PASS_SECTIONS), ("all", m, every)]
    sets += [(f"without {s}", m, [x for x in every if x != s]) for s in every]
    no_tables, tables = one_pass("tables")
    kept, counters = one_pass("counters")
    sets += [
        ("time alone", [TIME_METRIC], []),
        ("time and DRAM bytes", DRAM, []),
        ("all but the tables, time and DRAM", DRAM, no_tables),
        ("the one pass, the tables by name", m + tables, no_tables),
        ("the sections kept when the counters go by name", m, kept),
        ("the one pass, every counter section by name", m + counters, kept),
    ]
    return sets


async def section_costs(leave_one_out: bool = True) -> list[dict[str, Any]]:
    """Each section set on a pre-launched target, the Triton kernel as diagnose collects it
    (without ``leave_one_out``: not the rows that leave one section out)."""
    rows: list[dict[str, Any]] = []
    async with server("sections", "1") as warm:
        await warm.call("profile_kernel", PROFILE_TRITON)  # starts the slot's targets
        for label, metrics, sections in section_sets():
            if not leave_one_out and label.startswith("without "):
                continue
            await warm.wait_ready()
            args = {
                **PROFILE_TRITON,
                "metrics": metrics,
                "options": {"sections": sections, "warmup": 1},
            }
            seconds, answer = await warm.call("profile_kernel", args)
            run = warm.stages(answer).get("run") or {}
            row = {
                "label": label,
                "wall_s": round(seconds, 3),
                "ncu_s": run.get("ncu"),
                "path": answer.get("collection"),
            }
            rows.append(row)
            say(json.dumps(row))
    return rows


def summary(out: dict[str, Any]) -> dict[str, Any]:
    times = out["times"]
    medians = {k: round(med(v), 3) for k, v in times.items() if v}
    floor = medians.get("floor")
    ratios = {k: round(v / floor, 3) for k, v in medians.items() if floor and k != "floor"}
    prelaunched = sum(p == "pre-launched" for p in out["paths"]["burst"])
    return {
        "medians_s": medians,
        "ratio_to_floor": ratios,
        "prelaunched_over_cold": round(medians["prelaunched"] / medians["cold"], 3)
        if medians.get("cold") and medians.get("prelaunched")
        else None,
        "burst_prelaunched": f"{prelaunched} of {len(out['paths']['burst'])}",
        # a server's first profile_kernel against the raw floor (target: at most 0.6)
        "first_call_over_floor": round(out["first_call"]["seconds"] / floor, 3)
        if floor and out.get("first_call")
        else None,
        # diagnose_kernel from source against one pre-launched profile_kernel
        "diagnose_over_prelaunched": round(medians["diagnose"] / medians["prelaunched"], 3)
        if medians.get("diagnose") and medians.get("prelaunched")
        else None,
        # ... and against a pre-launched profile of the same (Triton) kernel
        "diagnose_over_same_kernel": round(medians["diagnose"] / medians["triton"], 3)
        if medians.get("diagnose") and medians.get("triton")
        else None,
        **{
            f"{side}_over_same_kernel": round(medians[side] / medians["triton"], 3)
            if medians.get(side) and medians.get("triton")
            else None
            for side in (f"diagnose_{c}" for c in ONE_PASS_CHOICES if c != "sections")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="write DIR/prelaunch.json")
    parser.add_argument("--sections", action="store_true", help="then each section's cost")
    parser.add_argument("--no-leave-one-out", action="store_true", help="with --sections")
    parser.add_argument("--budget-s", type=float, help="then diagnose_kernel within this budget")
    parser.add_argument(
        "--by-name",
        nargs="+",
        default=[],
        choices=[c for c in ONE_PASS_CHOICES if c != "counters"],  # counters: the default
        help="a diagnose side per choice, beside the default's (the counters by name)",
    )
    parser.add_argument(
        "--peer-examples", type=Path, help="then nsight-python 0.9.6's examples (bench.fast_loop)"
    )
    args = parser.parse_args()
    start = time.monotonic()
    by_name = tuple(args.by_name)
    out = anyio.run(measure, args.rounds, args.budget_s, by_name) if args.rounds else {}
    report = {**(summary(out) if out else {}), **out}
    if args.peer_examples:  # the same run: nsight-python's examples against ours
        from bench import fast_loop

        fast_loop.peer_phase(args.peer_examples, max(args.rounds, 1), time.monotonic() + 400)
        report["peer"] = fast_loop.RESULTS.get("peer")
        report["peer_ours_stages"] = fast_loop.RESULTS.get("peer_ours_stages")
    if args.sections:
        report["section_costs"] = anyio.run(section_costs, not args.no_leave_one_out)
    report["wall_s"] = round(time.monotonic() - start, 1)
    results.emit(report, args.out, "prelaunch.json")


if __name__ == "__main__":
    main()
