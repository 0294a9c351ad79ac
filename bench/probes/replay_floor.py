"""Issue 37, part 4: what an nsight-python example costs at the least, in any tool that profiles
it in a child under ncu, and where nsight-agent and nsight-python 0.9.6 sit above that.

For each example (00, 02, 07, 10), alternating, each round:

- ``ours`` and ``nsight-python``: the example file run as a user runs it (``python example.py``),
  ``import nsight`` resolving to our alias package or to nsight-python 0.9.6;
- ``imports``: the script's own imports in a plain interpreter (no GPU), as the parent pays them;
- ``child <mode>``: the example itself run directly under ncu with nsight-python's flags, with
  ``import nsight`` resolving to a minimal package (``SHIM``) whose ``annotate`` is an NVTX range
  and whose ``analyze.kernel`` only calls the function configs x runs times and exits: the
  profiled child with no tool in it. Modes: ``kernel`` (the example's replay), ``application``
  (the same kernels, one-pass metrics, ncu's application replay), ``unprofiled`` (an NVTX filter
  that matches nothing: every cost but the per-kernel profiling), ``our-flags`` (kernel replay
  with the options our own cold run adds: is the minimal child slower than ours because of them?),
  ``fast-exit`` (kernel replay, the child leaving by ``os._exit`` after its calls: what the
  interpreter's teardown under ncu costs, and whether ncu still has every kernel). Each child
  stamps the end of its calls; ``tail`` is from there to ncu's exit (teardown, report written).

The replay floor is ``imports + child kernel``: if it is above 0.7x nsight-python's time, 0.7x
is out of reach of a child under this ncu on that example. Needs a GPU, ncu, nvtx, ncu_report
and nsight-python 0.9.6 (``--peer-examples`` its examples/ folder)::

    python -m bench.probes.replay_floor --peer-examples .peer/nsight-python-0.9.6/examples \\
        --rounds 2 --json $OUT/replay_floor.json
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.fast_loop import PEER_EXAMPLES, say, script_imports
from bench.nsight_alias import OURS, PEER, tool_paths

SHIM = '''\
"""The least a profiled child runs: NVTX ranges around the marked code, the calls, then exit."""
import functools
import os
import sys
import time

import nvtx


class annotate:
    def __init__(self, name, *_, **__):
        self.name = name

    def __enter__(self):
        nvtx.push_range(self.name, domain="shim")

    def __exit__(self, *exc):
        nvtx.pop_range(domain="shim")
        return False


class analyze:
    @staticmethod
    def kernel(_func=None, *, configs=None, runs=1, **_):
        def decorate(func):
            @functools.wraps(func)
            def call(*args, **kwargs):
                todo = [tuple(c) if isinstance(c, (tuple, list)) else (c,) for c in configs] \\
                    if configs is not None else [args]
                for config in todo:
                    for _ in range(runs):
                        func(*config, **kwargs)
                import torch
                torch.cuda.synchronize()
                with open(os.environ["RF_STAMP"], "w") as stamp:
                    stamp.write(repr(time.time()))
                if os.environ.get("RF_FAST_EXIT"):
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(0)
                sys.exit(0)
            return call
        return decorate(_func) if _func is not None else decorate

    @staticmethod
    def plot(*_, **__):
        return lambda func: func
'''

CHILD_MODES = ("kernel", "application", "unprofiled", "our-flags", "fast-exit")


def example_metrics(example: Path) -> list[str]:
    """The ``metrics=[...]`` the example passes to ``analyze.kernel`` (ncu's default otherwise)."""
    for node in ast.walk(ast.parse(example.read_text())):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "metrics":
                    return list(ast.literal_eval(kw.value))
    return ["gpu__time_duration.sum"]


def run_timed(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, bool, str]:
    """Wall seconds, success, and the output's tail (ours' stage line included)."""
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    inner = re.search(r"done in [0-9.]+ s(?: \([^)]*\))?", proc.stdout or "")
    tail = inner.group(0) if inner and proc.returncode == 0 else (proc.stderr or proc.stdout)[-600:]
    return time.monotonic() - started, proc.returncode == 0, tail


def profiled_kernels(report: Path) -> int:
    import ncu_report

    ctx = ncu_report.load_report(str(report))
    return sum(ctx.range_by_idx(i).num_actions() for i in range(ctx.num_ranges()))


def child(example: Path, mode: str, shim: Path, base_path: str) -> dict[str, Any]:
    """The example under ncu with nsight-python's flags and the shim in place of a tool."""
    cwd = tempfile.mkdtemp(prefix="rf-child-")
    report = Path(cwd) / "child.ncu-rep"
    ncu = shutil.which("ncu") or "ncu"
    include = "regex:shim@.+/" if mode != "unprofiled" else "regex:nothing-matches@.+/"
    replay = "application" if mode == "application" else "kernel"
    # our-flags: kernel replay with the options our own cold run adds (engine/collection/ncu.py)
    ours = ["--print-summary", "none", "--target-processes", "all", "--log-file",
            str(Path(cwd) / "ncu.log")] if mode == "our-flags" else []  # fmt: skip
    cmd = [ncu, *ours, "--cache-control", "all", "--clock-control", "none", "--replay-mode", replay,
           "--nvtx", "--nvtx-include", include, "--metrics", ",".join(example_metrics(example)),
           "-f", "-o", str(report), sys.executable, str(example.resolve())]  # fmt: skip
    stamp = Path(cwd) / "calls-done"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), base_path]), "MPLBACKEND": "Agg",
           "RF_STAMP": str(stamp), **({"RF_FAST_EXIT": "1"} if mode == "fast-exit" else {})}  # fmt: skip
    seconds, ok, tail = run_timed(cmd, env, cwd)
    ended = time.time()
    kernels = profiled_kernels(report) if ok and report.exists() else 0
    if not ok:
        say("   " + tail.replace("\n", "\n   "))
    after = ended - float(stamp.read_text()) if stamp.exists() else float("nan")
    return {"s": seconds, "ok": ok, "kernels": kernels, "tail": after}


def med(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--peer-examples", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--examples", default=",".join(PEER_EXAMPLES), help="name prefixes")
    parser.add_argument("--modes", default=",".join(CHILD_MODES))
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--ours-also",
        action="append",
        default=[],
        metavar="LABEL:VAR=VALUE[,VAR=VALUE]",
        help="also run ours with these environment variables (e.g. "
        "normal-exit:NSIGHT_AGENT_CHILD_EXIT=normal), as one more tool in the alternation",
    )
    args = parser.parse_args()
    prefixes = tuple(args.examples.split(","))
    modes = [m for m in args.modes.split(",") if m]
    chosen = sorted(p for p in args.peer_examples.glob("*.py") if p.name.startswith(prefixes))
    shim = Path(tempfile.mkdtemp(prefix="rf-shim-"))
    (shim / "nsight").mkdir()
    (shim / "nsight" / "__init__.py").write_text(SHIM)
    tools = tool_paths()
    base = tools[PEER]
    extra_env = {tool: {} for tool in tools}
    for also in args.ours_also:
        label, _, assignments = also.partition(":")
        tools[f"ours {label}"] = tools[OURS]
        extra_env[f"ours {label}"] = dict(a.split("=", 1) for a in assignments.split(",") if a)
    results: dict[str, dict[str, list[Any]]] = {}
    for r in range(args.rounds):
        for i, example in enumerate(chosen):
            rows = results.setdefault(example.name, {})
            order = list(tools) if (r + i) % 2 == 0 else list(reversed(tools))
            for tool in order:
                env = {
                    **os.environ,
                    "PYTHONPATH": tools[tool],
                    "MPLBACKEND": "Agg",
                    **extra_env[tool],
                }
                cmd = [sys.executable, str(example.resolve())]
                seconds, ok, tail = run_timed(cmd, env, tempfile.mkdtemp(prefix="rf-tool-"))
                rows.setdefault(tool, []).append(seconds if ok else float("nan"))
                say(
                    f"round {r} {example.name:28s} {tool:16s} {seconds:6.1f} s {'ok' if ok else 'FAILED'}"
                )
                if tool != PEER or not ok:  # ours: its profile call's stage seconds
                    say("   " + tail.replace("\n", "\n   "))
            if "kernel" in modes:  # the script's imports: half of the replay floor
                line = "import " + ", ".join(script_imports(example))
                seconds, ok, tail = run_timed([sys.executable, "-c", line], dict(os.environ), ".")
                rows.setdefault("imports", []).append(seconds if ok else float("nan"))
                say(f"round {r} {example.name:28s} {'imports':16s} {seconds:6.1f} s ({line})")
            for mode in modes:
                got = child(example, mode, shim, base)
                rows.setdefault(f"child {mode}", []).append(got["s"] if got["ok"] else float("nan"))
                rows.setdefault(f"kernels {mode}", []).append(got["kernels"])
                rows.setdefault(f"tail {mode}", []).append(got["tail"])
                say(f"round {r} {example.name:28s} {'child ' + mode:16s} {got['s']:6.1f} s "
                    f"{got['kernels']} kernels profiled, {got['tail']:.2f} s from the calls' end "
                    "to ncu's exit")  # fmt: skip
    say("\n== summary (medians) ==")
    for name, rows in results.items():
        ours, peer = med(rows.get(OURS, [])), med(rows.get(PEER, []))
        floor = med(rows.get("imports", [])) + med(rows.get("child kernel", []))
        said = f"{name}: ours {ours:.1f} s, nsight-python {peer:.1f} s, ratio {ours / peer:.2f}"
        if floor == floor:  # the child ran (--modes with kernel)
            said += (f"; replay floor {floor:.1f} s = {floor / peer:.2f} of nsight-python's time "
                     f"(imports {med(rows.get('imports', [])):.1f} + child "
                     f"{med(rows.get('child kernel', [])):.1f})")  # fmt: skip
        say(said)
        kernel, unprofiled = (
            med(rows.get("child kernel", [])),
            med(rows.get("child unprofiled", [])),
        )
        n = max(rows.get("kernels kernel", [0]) or [0])
        if n and unprofiled == unprofiled:
            say(f"   {n} kernels profiled: {1e3 * (kernel - unprofiled) / n:.1f} ms each "
                f"(child kernel {kernel:.1f} s - unprofiled {unprofiled:.1f} s)")  # fmt: skip
        app = med(rows.get("child application", []))
        if app == app:
            say(f"   application replay {app:.1f} s against kernel replay {kernel:.1f} s")
        fast = med(rows.get("child fast-exit", []))
        if fast == fast:
            say(f"   child leaving by os._exit {fast:.1f} s against kernel replay {kernel:.1f} s "
                f"(calls' end to ncu's exit {med(rows.get('tail fast-exit', [])):.2f} s against "
                f"{med(rows.get('tail kernel', [])):.2f} s; kernels "
                f"{rows.get('kernels fast-exit')} against {rows.get('kernels kernel')})")  # fmt: skip
        for tool in (t for t in rows if t.startswith("ours ")):
            say(f"   {tool} {med(rows[tool]):.1f} s against ours {ours:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
