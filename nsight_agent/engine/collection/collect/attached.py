"""Attached: the job handed to one of the GPU slot's pre-launched targets, which waits under
``ncu --mode launch`` with Python, torch and triton already imported, and ncu attached to it
(``attach.py``). It takes the target after the pre-flight; where none is ready then, or the
attach itself fails, the job launches cold and its answer says why ("attach failed: ...").
An attach that fails for every job alike turns the slot's targets off.
"""

from __future__ import annotations

from dataclasses import dataclass

from nsight_agent.engine.collection.collect import attach, profiled
from nsight_agent.engine.collection.collect.cold import Cold
from nsight_agent.engine.collection.collect.strategy import (
    Collected,
    CollectJob,
    RunPlace,
    Strategy,
    counted,
    dropped,
)
from nsight_agent.engine.store.runs import PreflightResult


@dataclass
class Attached(Strategy):
    """A pre-launched target from ``targets``, cold where none serves."""

    job: CollectJob
    targets: attach.TargetSource

    def collect(self, run: RunPlace, pre: PreflightResult) -> Collected:
        target = self.targets.take()
        if target is None:
            return Cold(self.job, self.targets.why_none()).collect(run, pre)
        try:
            return profiled.attached(
                self.job, run, target, skip=dropped(pre), expected=counted(pre)
            )
        except attach.AttachFailed as failed:
            profiled.forget_attempt(run.run_dir)
            if failed.lasting:
                self.targets.turn_off(str(failed))
            return Cold(self.job, f"attach failed: {failed}").collect(run, pre)
