"""Early: a cold launch started beside the pre-flight (``NSIGHT_AGENT_EARLY_NCU=0``: after it,
as ``cold.py`` launches).

The harness under ncu starts with the pre-flight, imports torch, brings CUDA up and waits for
a gate file (``program_io.wait_for_gate``); the pipeline writes the pre-flight's verdict there
(the variants to skip) or "stop". Measuring still starts only after the pre-flight: what
overlaps is the profiled interpreter's start, its imports and its CUDA context, with the
pre-flight and a candidate's compile. On the H200 this order saves seconds on a
``load_inline`` candidate's first ncu call on a fresh machine (beyond its compile) against the
staged order, and with the candidate built the ncu stage is far shorter than staged; verdicts
and values agree in every pair.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from nsight_agent.engine.collection.call_markers import KernelCounts
from nsight_agent.engine.collection.collect import profiled
from nsight_agent.engine.collection.collect.strategy import (
    Collected,
    CollectJob,
    RunPlace,
    Strategy,
    counted,
    dropped,
)
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.errors import CollectionTimeoutError

ENV = "NSIGHT_AGENT_EARLY_NCU"
GATE = "gate.json"
STOP_WAIT_S = 30.0  # a stopped harness exits at once; ncu's own exit after it takes seconds


def enabled(env: Mapping[str, str]) -> bool:
    return env.get(ENV) != "0"


def open_gate(gate: Path, verdict: dict[str, object]) -> None:
    """Write the pre-flight's verdict whole (the harness never reads half a file)."""
    partial = gate.with_suffix(".part")
    partial.write_text(json.dumps(verdict))
    partial.replace(gate)


@dataclass
class Early(Strategy):
    """A cold launch from the moment the pre-flight starts; ``why``: no target served it."""

    job: CollectJob
    why: str
    _started: EarlyCollect | None = field(default=None, init=False, repr=False)

    def preflight(self, run: RunPlace, preflight: Callable[[], PreflightResult]) -> PreflightResult:
        """The harness under ncu started, then the pre-flight; any failure stops the harness
        unmeasured."""
        self._started = EarlyCollect(
            run.run_dir,
            lambda gate: profiled.cold(self.job, run, self.why, gate=gate),
            self.job.runs,
        )
        try:
            return super().preflight(run, preflight)
        except BaseException:
            self._started.stop()
            raise

    def collect(self, run: RunPlace, pre: PreflightResult) -> Collected:
        assert self._started is not None, "collect follows preflight"
        return self._started.measure(dropped(pre), counted(pre))


class EarlyCollect:
    """One collect stage running in a thread from the moment the pre-flight starts."""

    def __init__(self, run_dir: Path, collect: Callable[[Path], Collected], runs: int = 1) -> None:
        self.gate, self.runs = run_dir / GATE, runs
        self._result: Collected | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(collect,), daemon=True)
        self._thread.start()

    def _run(self, collect: Callable[[Path], Collected]) -> None:
        try:
            self._result = collect(self.gate)
        except BaseException as err:  # raised where the pipeline waits for it (measure)
            self._error = err

    def measure(self, skip: list[str], expected: KernelCounts | None = None) -> Collected:
        """The pre-flight passed: measure all but ``skip``, and wait for the collect stage; cut
        by its limit, it says what the pre-flight's kernel counts (``expected``) would need
        at the pace ncu kept since the verdict."""
        opened = time.monotonic()
        open_gate(self.gate, {"skip": skip})
        self._thread.join()
        if isinstance(self._error, CollectionTimeoutError):
            err = profiled.with_estimate(
                self._error, expected, self.runs, skip, time.monotonic() - opened
            )
            err.reword(
                f"{err.message} (ncu started beside the pre-flight, so its limit was timeout_s "
                "twice: once for the pre-flight, once for profiling.)",
                err.hint,
            )
            raise err
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def stop(self) -> None:
        """The pre-flight failed (or the run was cancelled): the harness exits unmeasured;
        what its collect stage raises for that is not the run's error."""
        open_gate(self.gate, {"stop": True})
        self._thread.join(STOP_WAIT_S)
