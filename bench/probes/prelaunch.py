"""Probe ncu's launch/attach mode for pre-launched targets, on a GPU machine with ncu.

A target is a Python process started under ``ncu --mode launch`` that imports torch and
triton, writes a ready file, waits for a job file, then runs a few kernels (the first CUDA
call suspends it until a profiler attaches). Each case below is timed and its outcome kept:

  floor        python + torch + one kernel, cold, without and under ncu (the wall to beat)
  ready        does the target reach its ready file (no CUDA call while importing)?
  attach       job handed, then ``ncu --mode attach``: latency from job to report
  early        attach started before the job arrives (the target still in Python)
  nvtx         attach with an NVTX include filter: only the job's range profiled?
  options      attach with replay, cache, clock and section options
  app_replay   attach with --replay-mode application (expected to be refused)
  two          two targets at once on two ports
  kill         the launcher killed while its target waits: is the target left behind?

``--scoping`` asks how an attached report can be tied to the job's calls without
NVTX: the harness's call markers (an empty Triton kernel whose grid names the call, launched
before and after it) and ``--profile-from-start off`` with cudaProfilerStart/Stop around it,
at the attach and at the launch. Each case lists every profiled kernel with its grid.

``--imports`` asks which import makes a CUDA call before a target is ready (seen on the H200
with the pool's own targets, not with this probe's): one target per step of what
``worker/target.warm_imports`` imports, each reporting whether it got ready or ncu held it.

    python3 -m bench.probes.prelaunch [--out DIR]     (writes DIR/prelaunch.json)
    python3 -m bench.probes.prelaunch --scoping [--out DIR]   (DIR/prelaunch_scoping.json)
    python3 -m bench.probes.prelaunch --imports [--out DIR]   (DIR/prelaunch_imports.json)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET = r"""
import json, os, sys, time
t0 = time.time()
import torch, triton, triton.language as tl, nvtx
work = sys.argv[1]
open(os.path.join(work, "ready.json"), "w").write(json.dumps({"import_s": time.time() - t0}))
job = os.path.join(work, "job.json")
while not os.path.exists(job):
    time.sleep(0.002)
t_job = time.time()
x = torch.ones(1 << 22, device="cuda")
t_cuda = time.time()
MARK = os.environ.get("PROBE_MARKERS") == "1"
API = os.environ.get("PROBE_PROFILER_API") == "1"
if MARK:
    from nsight_agent.engine.harness import call_markers
for i in range(3):
    if i == 2:
        r = nvtx.start_range("job", domain="probe")
        if API:
            torch.cuda.profiler.start()
        if MARK:
            call_markers.launch(7, call_markers.BEGIN)
    y = x * 2.0 + 1.0
    if i == 2:
        if MARK:
            call_markers.launch(7, call_markers.END)
        if API:
            torch.cuda.profiler.stop()
        torch.cuda.synchronize()
        nvtx.end_range(r)
torch.cuda.synchronize()
open(os.path.join(work, "done.json"), "w").write(json.dumps(
    {"first_cuda_s": t_cuda - t_job, "job_to_done_s": time.time() - t_job}))
"""

COLD = r"""
import torch
x = torch.ones(1 << 22, device="cuda")
y = x * 2.0 + 1.0
torch.cuda.synchronize()
"""


def _run(cmd: list[str], timeout: float = 120.0) -> tuple[int, float, str]:
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, time.perf_counter() - t, (p.stdout + p.stderr)[-1500:]
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return -999, time.perf_counter() - t, f"TIMEOUT {timeout}s " + out[-800:]


def _kernels(rep: Path) -> list[str] | str:
    """Each profiled kernel's name and the NVTX ranges its action recorded (attach mode takes
    no --nvtx option: is the NVTX state in the report anyway?)."""
    try:
        import ncu_report

        rng = ncu_report.load_report(str(rep)).range_by_idx(0)
        out = []
        for i in range(rng.num_actions()):
            a = rng.action_by_idx(i)
            state = a.nvtx_state()
            ranges = []
            if state is not None:
                for d in state.domains():
                    dom = state.domain_by_id(d)
                    ranges += [
                        f"{dom.name()}:{n}"
                        for n in [*dom.start_end_ranges(), *dom.push_pop_ranges()]
                    ]
            grid = [
                a[m].value() if m in a.metric_names() else None
                for m in ("launch__grid_dim_x", "launch__grid_dim_y", "launch__grid_dim_z")
            ]
            out.append(f"{a.name()[:60]} grid={grid} {ranges}")
        return out
    except Exception as e:
        return f"unreadable: {e}"


def _pids(pattern: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return out.split()


class Target:
    def __init__(
        self,
        root: Path,
        name: str,
        port_args: list[str],
        launch_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.work = root / name
        self.work.mkdir(parents=True)
        script = self.work / "target.py"
        script.write_text(TARGET)
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [
                "ncu",
                "--mode",
                "launch",
                *port_args,
                *launch_args,
                sys.executable,
                str(script),
                str(self.work),
            ],
            stdout=open(self.work / "launch.log", "w"),  # noqa: SIM115 - lives with the target
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )

    def ready(self, timeout: float = 90.0) -> float | None:
        """Seconds from launch to the target's ready file; None when it timed out or ncu
        exited first (an option refused at launch, say)."""
        t = time.perf_counter()
        while time.perf_counter() - t < timeout:
            if (self.work / "ready.json").exists():
                return time.perf_counter() - self.t0
            if self.proc.poll() is not None:
                return None
            time.sleep(0.005)
        return None

    def give_job(self) -> None:
        (self.work / "job.json").write_text("{}")

    def log(self) -> str:
        return (self.work / "launch.log").read_text()[-1200:]

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def attach(
    rep: Path, extra: list[str], port_args: list[str], timeout: float = 120.0
) -> dict[str, Any]:
    cmd = [
        "ncu",
        "--mode",
        "attach",
        "--hostname",
        "127.0.0.1",
        *port_args,
        "-f",
        "-o",
        str(rep),
        *extra,
    ]
    rc, secs, out = _run(cmd, timeout)
    rep_file = rep.with_suffix(".ncu-rep")
    return {
        "cmd": " ".join(cmd[3:]),
        "rc": rc,
        "attach_s": round(secs, 3),
        "tail": out[-700:],
        "report": rep_file.exists(),
        "kernels": _kernels(rep_file) if rep_file.exists() else None,
    }


def case(
    root: Path,
    name: str,
    launch_args: tuple[str, ...],
    attach_args: list[str],
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One target launched with ``launch_args`` (and ``env``), given its job, then attached
    with ``attach_args``: what the attach and the target left."""
    t = Target(root, name, [], launch_args, env)
    out: dict[str, Any] = {"ready_s": t.ready(), "env": env, "launch_args": list(launch_args)}
    if out["ready_s"] is not None:
        t.give_job()
        time.sleep(0.2)
        out.update(attach(root / name, attach_args, []))
        try:
            t.proc.wait(30)
        except subprocess.TimeoutExpired:
            out["target_alive_after_attach"] = True
        done = t.work / "done.json"
        out["done"] = json.loads(done.read_text()) if done.exists() else None
    out["launch_log"] = t.log()[-400:]
    t.kill()
    print(name, json.dumps(out)[:900], flush=True)
    return out


def filters(root: Path) -> dict[str, Any]:
    """Filters at launch (NVTX) and at attach (kernel name, launch count): which are accepted,
    and does the report hold only what they select? The job's range holds 2 of 6 kernels."""
    metric = ["--metrics", "gpu__time_duration.sum"]
    cases = [
        ("launch_nvtx_only", ("--nvtx",), metric),
        ("attach_kernel_regex", (), [*metric, "-k", "regex:elementwise", "-c", "2"]),
        ("attach_launch_skip", (), [*metric, "--launch-skip", "4", "--launch-count", "1"]),
    ]
    return {name: case(root, name, launch, attach_args) for name, launch, attach_args in cases}


def scoping(root: Path) -> dict[str, Any]:
    """Without NVTX in attach mode, what ties kernels to calls? Each case: which kernels the
    report holds (of 6 elementwise kernels and a fill; the job's last 2 are bracketed)."""
    metric = ["--metrics", "gpu__time_duration.sum"]
    off = ["--profile-from-start", "off"]
    cases: list[tuple[str, dict[str, str], tuple[str, ...], list[str]]] = [
        ("markers", {"PROBE_MARKERS": "1"}, (), metric),
        ("api_attach_off", {"PROBE_PROFILER_API": "1"}, (), [*metric, *off]),
        ("api_launch_off", {"PROBE_PROFILER_API": "1"}, tuple(off), metric),
        ("markers_api_attach_off", {"PROBE_MARKERS": "1", "PROBE_PROFILER_API": "1"}, (),
         [*metric, *off]),
        ("api_without_off", {"PROBE_PROFILER_API": "1"}, (), metric),
    ]  # fmt: skip
    return {
        name: case(root, name, launch, attach_args, env) for name, env, launch, attach_args in cases
    }


IMPORTS_TARGET = r"""
import json, os, sys, importlib
work = sys.argv[1]
for name in sys.argv[2].split(","):
    importlib.import_module(name)
open(os.path.join(work, "ready.json"), "w").write(json.dumps({"imported": sys.argv[2]}))
"""
IMPORT_STEPS = [
    "torch,triton,triton.language,nvtx",
    "torch,triton,triton.language,nvtx,numpy,nsight_agent.annotation",
    "torch,nsight_agent.engine.harness.checks",
    "torch,nsight_agent.engine.harness.integrity",
    "torch,nsight_agent.engine.harness.runtime",
    "nsight_agent.engine.worker.target",
]


def imports(root: Path) -> dict[str, Any]:
    """Each step's modules imported under ``ncu --mode launch``: ready (no CUDA call), or held
    at a CUDA call ("Waiting for profiler to attach") while importing; then the pool's own
    warm_imports, run as the target program does."""
    out: dict[str, Any] = {}
    steps = [*IMPORT_STEPS, "warm_imports"]
    for i, modules in enumerate(steps):
        work = root / f"imports{i}"
        work.mkdir(parents=True)
        script = work / "target.py"
        if modules == "warm_imports":
            script.write_text(
                "import json, os, sys\n"
                "from nsight_agent.engine.worker import target\n"
                "info = target.warm_imports()\n"
                "open(os.path.join(sys.argv[1], 'ready.json'), 'w').write(json.dumps(info))\n"
            )
            argv = [str(script), str(work)]
        else:
            script.write_text(IMPORTS_TARGET)
            argv = [str(script), str(work), modules]
        log = work / "launch.log"
        proc = subprocess.Popen(
            ["ncu", "--mode", "launch", sys.executable, *argv],
            stdout=open(log, "w"),  # noqa: SIM115 - closed with the process
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        # ncu prints "Waiting for profiler to attach" at launch, before any import ran (0.2 s
        # on the H200): the message alone says nothing. A target that makes a CUDA call while
        # importing never writes its ready file, so: ready within 40 s, or held.
        t0, state = time.perf_counter(), "held (no ready file in 40 s): a CUDA call while importing"
        while time.perf_counter() - t0 < 40:
            if (work / "ready.json").exists():
                state = "ready"
                break
            if proc.poll() is not None:
                state = f"exited {proc.returncode}"
                break
            time.sleep(0.05)
        out[modules] = {"state": state, "s": round(time.perf_counter() - t0, 2),
                        "log": log.read_text(errors="replace")[-300:]}  # fmt: skip
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        print(modules, json.dumps(out[modules])[:400], flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--filters-only", action="store_true", help="only the filter cases")
    ap.add_argument("--scoping", action="store_true", help="only the cases without NVTX")
    ap.add_argument("--imports", action="store_true", help="which import holds a target")
    args = ap.parse_args()
    only = {"imports": (args.imports, imports), "scoping": (args.scoping, scoping),
            "filters": (args.filters_only, filters)}  # fmt: skip
    for label, (asked, probe) in only.items():
        if asked:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            found = probe(Path(tempfile.mkdtemp(prefix="prelaunch-")))
            Path(args.out, f"prelaunch_{label}.json").write_text(json.dumps(found, indent=1))
            return
    out: dict[str, Any] = {}
    root = Path(tempfile.mkdtemp(prefix="prelaunch-"))
    helptext = subprocess.run(["ncu", "--help"], capture_output=True, text=True).stdout
    out["help"] = [
        ln.strip()
        for ln in helptext.splitlines()
        if re.search(r"--(mode|hostname|port|max-connections)\b", ln)
    ]
    has_port = "--port" in helptext
    metric = ["--metrics", "gpu__time_duration.sum"]

    cold = root / "cold.py"
    cold.write_text(COLD)
    floor = []
    for i in range(2):
        rc1, t_plain, _ = _run([sys.executable, str(cold)])
        rc2, t_ncu, _tail = _run(
            ["ncu", *metric, "-f", "-o", str(root / f"floor{i}"), sys.executable, str(cold)]
        )
        floor.append({"plain_s": round(t_plain, 2), "ncu_s": round(t_ncu, 2), "rc": [rc1, rc2]})
    out["floor"] = floor
    print("floor", floor, flush=True)

    # ready + attach after the job (the target suspended at its first CUDA call)
    cases: dict[str, Any] = {}
    for name, extra, early in [
        ("attach", metric, False),
        ("attach2", metric, False),
        ("early", metric, True),
        ("nvtx", [*metric, "--nvtx", "--nvtx-include", "probe@job/"], False),
        (
            "options",
            [
                "--replay-mode",
                "kernel",
                "--cache-control",
                "all",
                "--clock-control",
                "base",
                "--section",
                "SpeedOfLight",
                "--section",
                "LaunchStats",
            ],
            False,
        ),
        ("app_replay", ["--replay-mode", "application", *metric], False),
    ]:
        t = Target(root, name, [])
        ready = t.ready()
        case: dict[str, Any] = {"ready_s": None if ready is None else round(ready, 2)}
        if ready is None:
            case["launch_log"] = t.log()
            t.kill()
            cases[name] = case
            continue
        time.sleep(0.5)
        t0 = time.perf_counter()
        if early:
            import threading

            res: dict[str, Any] = {}
            th = threading.Thread(
                target=lambda r=res, n=name, e=extra: r.update(attach(root / n, e, []))
            )
            th.start()
            time.sleep(1.0)
            t.give_job()
            th.join(150)
            case.update(res)
        else:
            t.give_job()
            time.sleep(0.2)
            case.update(attach(root / name, extra, []))
        case["job_to_report_s"] = round(time.perf_counter() - t0, 3)
        try:
            t.proc.wait(30)
        except subprocess.TimeoutExpired:
            case["target_alive_after_attach"] = True
        case["launcher_rc"] = t.proc.returncode
        done = t.work / "done.json"
        case["done"] = json.loads(done.read_text()) if done.exists() else None
        case["launch_log"] = t.log()[-500:]
        t.kill()
        cases[name] = case
        print(name, json.dumps(case)[:600], flush=True)
    out["cases"] = cases

    # two at once
    two: dict[str, Any] = {"has_port_option": has_port}
    pa = [["--port", "49200"], ["--port", "49300"]] if has_port else [[], []]
    ts = [Target(root, f"two{i}", pa[i]) for i in range(2)]
    two["ready_s"] = [t.ready() for t in ts]
    for t in ts:
        t.give_job()
    time.sleep(0.3)
    two["attach"] = [attach(root / f"two{i}", metric, pa[i], 90) for i in range(2)]
    two["launch_logs"] = [t.log()[-400:] for t in ts]
    for t in ts:
        t.kill()
    out["two"] = two
    print("two", json.dumps(two)[:800], flush=True)

    # kill the launcher while its target waits for a job
    k = Target(root, "kill", [])
    kr: dict[str, Any] = {"ready_s": k.ready()}
    kr["pids_before"] = _pids(str(k.work / "target.py"))
    k.proc.send_signal(signal.SIGTERM)
    try:
        k.proc.wait(10)
    except subprocess.TimeoutExpired:
        kr["launcher_survived_sigterm"] = True
    time.sleep(1.0)
    kr["pids_after_sigterm"] = _pids(str(k.work / "target.py"))
    k.kill()
    time.sleep(0.5)
    kr["pids_after_killpg"] = _pids(str(k.work / "target.py"))
    out["kill"] = kr
    print("kill", kr, flush=True)

    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "prelaunch.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
