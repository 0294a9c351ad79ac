"""Cold: the harness launched under ncu (``ncu python harness.py``) once the pre-flight has
passed, the variants it dropped left out. The way a job takes when no pre-launched target can
serve it and the collect stage is not started beside the pre-flight (``early.py``), and where
every other way falls back; its answer says why it ran cold (``Collected.path``).
"""

from __future__ import annotations

from dataclasses import dataclass

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

NO_TARGETS = "no pre-launched targets here"


@dataclass
class Cold(Strategy):
    """A cold launch after the pre-flight; ``why``: no target served it, and why."""

    job: CollectJob
    why: str

    def collect(self, run: RunPlace, pre: PreflightResult) -> Collected:
        return profiled.cold(self.job, run, self.why, skip=dropped(pre), expected=counted(pre))
