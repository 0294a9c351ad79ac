"""Where a pre-launched profile's seconds go, on a GPU machine with ncu.

One in-process session (the server's executor and warm workers) profiles the prelaunch
suite's torch kernel through a ready target, ``ROUNDS`` times. Each event is stamped with the
wall clock, in this process and, through a ``sitecustomize`` put on the targets' path, in the
target itself:

  server  job handed; each ``ncu --mode attach`` started and ended (and whether it found no
          target yet); the wait for the target's end; the kill
  target  the harness started; its first CUDA call (suspended there until ncu attaches) and
          CUDA up; each stage of the harness's program (load, first calls, warm-up, measured
          runs) and each call's markers; the harness ended; the last atexit; ``os._exit``

Each round's measured values are kept (is the attached report whole?), and its seconds split
into: the job handed to CUDA up (the attach connecting), CUDA up to the harness's end, the
harness's end to the attach's end (the target's exit and ncu writing the report).

Then, apart from the pipeline: ``ncu --version`` (ncu's own start), and how long the
interpreter takes to exit with torch and CUDA up, with ``sys.exit`` and with ``os._exit``
(no ncu). Prints one JSON; ``--out DIR`` also writes DIR/attach_time.json.

    python3 -m bench.probes.attach_time [--rounds 4] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import results

EVENTS_ENV = "NSIGHT_AGENT_PROBE_EVENTS"  # the file a target appends its events to

# Put first on a target's sys.path: stamps the target's harness, CUDA start and exit.
SITECUSTOMIZE = r"""
import atexit, json, os, sys, time
_path = os.environ.get("NSIGHT_AGENT_PROBE_EVENTS")
def _say(what):
    if _path:
        with open(_path, "a") as f:
            f.write(json.dumps({"t": time.time(), "who": "target", "what": what}) + "\n")
if _path and "nsight_agent.engine.worker.target" in " ".join(sys.orig_argv):
    import runpy
    _run_path = runpy.run_path
    def run_path(*a, **k):
        _say("harness start")
        try:
            import torch.cuda
            _init = torch.cuda._lazy_init
            def _lazy_init():
                if not torch.cuda.is_initialized():
                    _say("first CUDA call")
                    _init()
                    _say("CUDA up")
                else:
                    _init()
            torch.cuda._lazy_init = _lazy_init
        except Exception as err:
            _say(f"no CUDA hook: {err}")
        try:
            _stamp_harness()
        except Exception as err:
            _say(f"no harness stamps: {err}")
        try:
            return _run_path(*a, **k)
        finally:
            _say("harness end")
    def _stamp_harness():
        import contextlib
        from nsight_agent.engine.harness import call_markers, program
        def wrap(holder, name):
            fn = getattr(holder, name)
            def wrapped(*a, **k):
                _say(name + " start")
                try:
                    return fn(*a, **k)
                finally:
                    _say(name + " end")
            setattr(holder, name, wrapped)
        for name in ("load", "inputs_vary", "first_calls", "warm_up", "measured_runs"):
            wrap(program.Program, name)
        around = call_markers.around
        @contextlib.contextmanager
        def stamped(*a, **k):
            _say("markers: BEGIN launching")
            with around(*a, **k):
                _say("markers: call starts")
                yield
                _say("markers: call ended, END launching")
            _say("markers: closed")
        call_markers.around = stamped
    runpy.run_path = run_path
    _os_exit = os._exit
    def _stamped_exit(code):
        _say("os._exit")
        _os_exit(code)
    os._exit = _stamped_exit
    atexit.register(lambda: _say("last atexit"))
"""

EXIT_PROGRAM = """
import os, sys, time, torch
x = torch.ones(1 << 20, device="cuda") * 2.0
torch.cuda.synchronize()
print(time.time(), flush=True)
os._exit(0) if sys.argv[1] == "os._exit" else sys.exit(0)
"""


def stamp(events: list[dict[str, Any]], what: str, **extra: Any) -> None:
    events.append({"t": time.time(), "who": "server", "what": what, **extra})


def instrument(events: list[dict[str, Any]]) -> None:
    """Wrap the attach's steps in this process (the server's side)."""
    from nsight_agent.engine import process
    from nsight_agent.engine.collection.collect import attach
    from nsight_agent.engine.worker import targets

    hand, kill = targets.Target.hand, targets.Target.kill

    def hand_(self: Any, *a: Any, **k: Any) -> None:
        stamp(events, "hand")
        hand(self, *a, **k)

    def kill_(self: Any) -> None:
        stamp(events, "kill")
        kill(self)

    run_to_file, wait_for_end = process.run_to_file, attach._wait_for_end

    def run_to_file_(argv: list[str], **k: Any) -> Any:
        if "attach" not in argv:
            return run_to_file(argv, **k)
        stamp(events, "attach start")
        done = run_to_file(argv, **k)
        log = Path(k["output_path"]).read_text(errors="replace")
        found = not attach.NOT_FOUND.search(log)
        stamp(events, "attach end", rc=done.returncode, connected=found)
        return done

    def wait_for_end_(*a: Any) -> None:
        stamp(events, "wait for end")
        wait_for_end(*a)
        stamp(events, "target ended")

    wrapped = [
        (targets.Target, "hand", hand_),
        (targets.Target, "kill", kill_),
        (process, "run_to_file", run_to_file_),
        (attach, "_wait_for_end", wait_for_end_),
    ]
    for holder, name, wrapper in wrapped:
        setattr(holder, name, wrapper)


def relative(events: list[dict[str, Any]], since: float) -> list[dict[str, Any]]:
    rows = sorted(events, key=lambda e: e["t"])
    return [{**e, "t": round(e["t"] - since, 3)} for e in rows]


def pipeline_rounds(rounds: int) -> list[dict[str, Any]]:
    import pandas as pd

    from bench.prelaunch import ONE, TORCH
    from nsight_agent.judge.builds import stage_seconds_of
    from nsight_agent.service import profile
    from nsight_agent.service.session import open_session

    site = Path(tempfile.mkdtemp(prefix="attach-site-"))
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    target_events = site / "events.jsonl"
    os.environ[EVENTS_ENV] = str(target_events)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(site), os.getcwd(), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    events: list[dict[str, Any]] = []
    instrument(events)
    runs = Path(tempfile.mkdtemp(prefix="attach-runs-"))
    opened = time.monotonic()
    session = open_session(runs)
    warming = session.warm_up()
    if warming is not None:
        warming.join(120)
    warmed = time.monotonic() - opened
    out: list[dict[str, Any]] = []
    try:
        for n in range(rounds):
            pool = session.executor.target_pool("0")  # type: ignore[attr-defined]
            if pool is None or not pool.wait_ready(90):
                raise RuntimeError(f"no target ready: {pool and pool.info()}")
            if n == 0:  # the server's start: its warm-up thread, then its first target ready
                ready = round(time.monotonic() - opened, 3)
                out.append({"warm_up_s": round(warmed, 3), "first_ready_s": ready})
            events.clear()
            target_events.write_text("")
            start = time.time()
            where = session.measuring(None, None)
            run = profile.profile(where, "ncu", source=TORCH, language="torch", configs=ONE, runs=1)
            wall = time.time() - start
            theirs = [json.loads(line) for line in target_events.read_text().splitlines()]
            out.append(
                {
                    "round": n,
                    "wall_s": round(wall, 3),
                    "collection": run.facts.collection,
                    "values": run.processed.get("AvgValue", pd.Series()).tolist(),
                    "stages": stage_seconds_of(runs / run.run_id),
                    "events": relative(events + theirs, start),
                }
            )
            print(json.dumps(out[-1]), flush=True)
    finally:
        session.close(warming)
    return out


def timed(argv: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.time()
    done = subprocess.run(argv, capture_output=True, text=True)
    return time.time() - start, done


def apart() -> dict[str, Any]:
    """ncu's own start, and an interpreter's exit with torch and CUDA up (no ncu)."""
    found: dict[str, Any] = {}
    ncu = shutil.which("ncu") or "ncu"
    found["ncu --version_s"] = [round(timed([ncu, "--version"])[0], 3) for _ in range(3)]
    for how in ("sys.exit", "os._exit", "sys.exit", "os._exit"):
        start = time.time()
        done = subprocess.run(
            [sys.executable, "-c", EXIT_PROGRAM, how], capture_output=True, text=True
        )
        end = time.time()
        printed = float(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
        found.setdefault(f"exit after CUDA work, {how}_s", []).append(
            round(end - printed, 3) if printed else done.stderr[-300:]
        )
        found.setdefault("whole program_s", []).append(round(end - start, 3))
    return found


SEGMENTS = {  # (from, to): what lies between
    "handed to CUDA up (the attach connecting)": ("hand", "CUDA up"),
    "CUDA up to the harness's end": ("CUDA up", "harness end"),
    "the harness's end to the report (exit, ncu writing)": ("harness end", "attach end"),
}
HARNESS_STAGES = ("load", "inputs_vary", "first_calls", "warm_up", "measured_runs")


def split(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians over the rounds: wall, each segment, each harness stage (seconds)."""

    def at(events: list[dict[str, Any]], what: str) -> float | None:
        return next((e["t"] for e in events if e["what"] == what), None)

    named = {**SEGMENTS, **{s: (f"{s} start", f"{s} end") for s in HARNESS_STAGES}}
    found: dict[str, list[float]] = {"wall": []}
    for r in (r for r in rounds if "events" in r):
        events = r["events"]
        found["wall"].append(r["wall_s"])
        for what, (start, end) in named.items():
            t0, t1 = at(events, start), at(events, end)
            if t0 is not None and t1 is not None:
                found.setdefault(what, []).append(t1 - t0)
    return {k: round(statistics.median(v), 3) for k, v in found.items() if v}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rounds = pipeline_rounds(args.rounds)
    result = {"medians_s": split(rounds), "apart": apart(), "rounds": rounds}
    results.emit(result, args.out, "attach_time.json")


if __name__ == "__main__":
    main()
