"""A server's first profile, paid while it warms up: one throwaway profile job per GPU slot.

The machine's first ncu run (``worker/first_ncu.py``: one empty kernel, no torch) pays part of
what a machine's first profile costs. On a fresh machine a server's first ``profile_kernel``
still spent longer than its later ones in its first profiled launch (the target's BEGIN marker
to its first measured call), also with its target launched only after that ncu run; a second
server on the same machine did not (``bench/probes/first_call.py``). What pays it is a whole
profile, so the warm-up runs one: a one-kernel torch source, queued as a user's job is, through
the slot's own path (the warm worker's pre-flight, an attached pre-launched target). Its run
folder is dropped; the pool launches the next target as after any job, and the server's warm
wait holds until that one is ready.

    handle = JobHandle(first_profile.job(root))    # queued like any job
    done = first_profile.outcome(handle)           # FirstProfile(seconds=..., ok=True, path=...)

Nothing the user asked for depends on it: a failure is said in the warm-up's log line and the
first profile then pays what is left, as it did before.
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass
from pathlib import Path

from nsight_agent.engine.executors.base import JobHandle
from nsight_agent.engine.pipeline import Job, RunResult
from nsight_agent.request import ProfileRequest

TIMEOUT_S = 90.0  # the job's whole time, queue and a fresh machine's first ncu work included
READY_S = 60.0  # how long the warm-up waits for the slot's first target before going without
# x * 2.0 on a million floats: one elementwise kernel, the shape of most first profiles.
SOURCE = """
import torch

def setup(n, device="cuda"):
    return (torch.ones(n, device=device),)

def run(x):
    return x * 2.0
"""


@dataclass(frozen=True)
class FirstProfile:
    seconds: float
    ok: bool
    why: str = ""  # what went wrong, when not ok
    path: str = ""  # the way it was collected ("pre-launched", "cold: ...")

    def said(self) -> str:
        """For the warm-up's log line: "first profile 3.1 s (pre-launched)" or why it failed."""
        if self.ok:
            return f"first profile {self.seconds:.1f} s ({self.path})"
        return f"first profile failed after {self.seconds:.1f} s: {self.why}"


def request() -> ProfileRequest:
    """One config, one measured run: the cheapest request that takes the whole path."""
    fields = {"source": SOURCE, "language": "torch", "configs": [{"n": 1 << 20}], "runs": 1}
    return ProfileRequest.model_validate(fields)


def job(runs_root: Path) -> Job:
    return Job(request(), runs_root, "profile")


def outcome(handle: JobHandle, timeout: float = TIMEOUT_S) -> FirstProfile:
    """Wait for the throwaway job and say how it went; one past ``timeout`` is cancelled."""
    start = time.monotonic()
    try:
        result = handle.result(timeout)
    except concurrent.futures.TimeoutError:
        handle.cancel()
        return FirstProfile(timeout, False, f"no answer within {timeout:g} s")
    except Exception as err:  # said, never raised: the user's first profile goes on without
        return FirstProfile(time.monotonic() - start, False, f"{type(err).__name__}: {err}")
    seconds = time.monotonic() - start
    if not isinstance(result, RunResult):
        return FirstProfile(seconds, False, f"not a profile: {type(result).__name__}")
    return FirstProfile(seconds, True, path=str(result.facts.collection or ""))
