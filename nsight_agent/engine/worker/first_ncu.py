"""A machine's first ncu run, paid while a server warms up.

The first kernel ncu profiles on a machine costs seconds that later ones do not (ncu's and the
driver's set-up of a profile). A pre-launched target cannot pay that ahead (ncu holds it at its
first CUDA call until a job attaches), so a server's first profile paid it. The warm-up
therefore runs ncu once, per GPU slot, on a program of one empty kernel (the driver API
through ctypes, no torch: ``cuda_early``), beside the warm worker's start. It pays part of
that cost, not all of it: a server's first profile still spent longer than later ones in its
first profiled launch (the prelaunch suite's target steps, docs/BENCHMARKS.md), which the
warm-up's throwaway profile that follows is there to pay (``executors/first_profile.py``).

    first = first_ncu.pay("0")      # FirstRun(seconds=..., ok=True, why="")

Nothing the user asked for depends on it: a failure is said in the warm-up's log line and the
first profile then pays what is left, as it did before.
"""

from __future__ import annotations

from dataclasses import dataclass

from nsight_agent.engine import pinning, process
from nsight_agent.engine.collection import ncu
from nsight_agent.errors import NcuNotFoundError
from nsight_agent.options import TIME_METRIC

TIMEOUT_S = 60.0
# One empty kernel launched on the first visible GPU; exit 3 when the driver refused a step.
PROGRAM = (
    "from nsight_agent.engine.worker import cuda_early; "
    "raise SystemExit(0 if cuda_early.bring_up('warmup') else 3)"
)


@dataclass(frozen=True)
class FirstRun:
    seconds: float
    ok: bool
    why: str = ""  # what went wrong, when not ok

    def said(self) -> str:
        """For the warm-up's log line: "first ncu run 1.9 s" or why it failed."""
        if self.ok:
            return f"first ncu run {self.seconds:.1f} s"
        return f"first ncu run failed after {self.seconds:.1f} s: {self.why}"


def argv(ncu_path: str) -> list[str]:
    """ncu on the one-kernel program: the time metric only, nothing written to disk."""
    program = [process.python_executable(), "-c", PROGRAM]
    return [ncu_path, "--metrics", TIME_METRIC, "--target-processes", "all", *program]


def pay(slot: str) -> FirstRun:
    """Run ncu once on ``slot``'s GPU (a ``CUDA_VISIBLE_DEVICES`` entry)."""
    try:
        ncu_path = ncu.find_ncu()
    except NcuNotFoundError as err:
        return FirstRun(0.0, False, str(err))
    with pinning.pinned(slot):  # the slot's GPU, as a job pinned to it gets
        env = process.child_env()
    try:
        done = process.run_capture(argv(ncu_path), timeout=TIMEOUT_S, env=env)
    except process.RunTimeout:
        return FirstRun(TIMEOUT_S, False, f"no answer within {TIMEOUT_S:g} s")
    except OSError as err:
        return FirstRun(0.0, False, f"ncu could not start: {err}")
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        last = lines[-1] if lines else "no output"
        return FirstRun(done.seconds, False, f"exit {done.returncode}: {last}")
    return FirstRun(done.seconds, True)
