"""A report read for judging and showing: its kernels (ncu's actions, the harness's call
markers and warm-up kernel left out, through the engine's ``extract``), each one's NVTX
ranges, the GPU it was recorded on; a launch-sampled call (ncu profiled one launch per
configuration) read as every launch it made, each as its configuration's profiled one. For a
run: which report it kept, its sampled launches, and which (config, run) each measured call
was. The views read reports only through what this hands them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from nsight_agent.engine.collection import extract, launch_sampling
from nsight_agent.engine.collection.launch_sampling import PreLaunch, preflight_launches
from nsight_agent.engine.collection.preflight_run import PREFLIGHT_PREFIX, read_manifest
from nsight_agent.engine.store.runs import artifact_paths
from nsight_agent.errors import InvalidRequestError
from nsight_agent.judge.run import RunLike

GPU_NAME = "device__attribute_display_name"


@dataclass(frozen=True)
class ReadReport:
    """One .ncu-rep's kernels in launch order, as ``read_report`` found them."""

    path: str | Path
    actions: list[Any]
    sampled: str | None = None  # how a launch-sampled call was read

    @cached_property
    def ranges(self) -> list[dict[str, list[str]]]:
        """Each kernel's NVTX ranges (domain -> names open at its launch), in order."""
        return [extract.nvtx_ranges(a) for a in self.actions]

    @cached_property
    def gpu(self) -> str | None:
        """The GPU the report was recorded on, from its first kernel."""
        if not self.actions:
            return None
        metric = self.actions[0].metric_by_name(GPU_NAME)
        value = metric.value() if metric is not None else None
        return str(value)[:200] if value is not None else None


def read_report(path: str | Path, launches: Sequence[PreLaunch] | None = None) -> ReadReport:
    """The report at ``path`` (a clear error for a missing, foreign or unreadable file);
    ``launches``: the pre-flight's launches of a launch-sampled call, read onto the profiled
    ones."""
    return ReadReport(path, *expanded(extract.iter_actions(extract.load(path)), launches))


def expanded(
    actions: list[Any], launches: Sequence[PreLaunch] | None
) -> tuple[list[Any], str | None]:
    """Every launch of a sampled call, and what the answer says of it; when the profiled
    launches cannot be mapped, the profiled ones alone, saying so."""
    if launches is None:
        return actions, None
    try:
        every = launch_sampling.expand(actions, launches)
    except launch_sampling.SamplingMismatch as err:
        return actions, (
            f"launch-sampled, not mapped ({err}): shares and launch counts count each "
            f"profiled configuration once ({len(actions)} launches of {len(launches)})"
        )
    if len(every) == len(actions):
        return every, None  # no configuration repeated: every launch was profiled
    return every, launch_sampling.note(len(actions), len(every))


def read_run_report(run: RunLike) -> ReadReport:
    """The run's kept report, a launch-sampled call read as every launch it made (a run a
    target served without sampling has no pre-flight launches to read:
    ``engine/collection/collect/plain.py``)."""
    path = report_of(run)
    manifest = None
    if not run.facts.collected_plain:
        manifest = read_manifest(run.run_dir / f"{PREFLIGHT_PREFIX}manifest.json")
    try:
        launches = preflight_launches(manifest) if manifest is not None else None
    except (ValueError, TypeError):  # a list not of [name, config, ns, op] entries
        launches = None
    return read_report(path, launches)


def report_of(run: RunLike) -> Path:
    """The run's kept .ncu-rep; a run without one is refused saying why (a timing run keeps
    no counters) and how to get a run that has one."""
    if run.files.report.is_file():
        return run.files.report
    found = sorted(run.run_dir.glob("*.ncu-rep"))
    if found:
        return found[0]
    if run.facts.method is not None:
        raise InvalidRequestError(
            f"Run {run.run_id} was timed (method 'timing', {run.facts.method}): the timing path "
            "keeps no counters and writes no Nsight Compute report, so it has none to read.",
            f"Profile its source under ncu, which collects them: {ncu_diagnose_call(run)} "
            "(ncu with counter access is needed: device_info says whether this machine has it).",
        )
    raise InvalidRequestError(
        f"Run {run.run_id} kept no .ncu-rep in {run.run_dir}.",
        f"get_run(run_id={run.run_id!r}) says what the run kept and, if it failed, why.",
    )


def ncu_diagnose_call(run: RunLike) -> str:
    """The diagnose_kernel call that profiles ``run``'s source under ncu: its kept source
    file, configs, language and (the baseline's) entry; ``cli/terms.py`` writes it as the
    ``nsight-agent diagnose`` command."""
    request = run.request
    baseline = next(
        (v for v in request.effective_variants() if v.name == request.baseline_name()), None
    )
    entry = baseline.entry if baseline is not None and baseline.source is None else request.entry
    configs = request.expanded_configs()
    args = f"source=<text of {artifact_paths(run.run_dir)['source']}>"
    if configs != [{}]:
        args += f", configs={json.dumps(configs, default=str)}"
    if request.language:
        args += f", language={request.language!r}"
    if entry != "run" and request.language != "kernelbench":
        args += f", entry={entry!r}"
    return f"diagnose_kernel({args})"


def call_configs(run: RunLike) -> dict[int, tuple[int, int]]:
    """call index -> (config index, run index) from the run's manifest, when it has one."""
    path = run.files.manifest
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
        return {int(c["call"]): (int(c["config"]), int(c["run"])) for c in data["calls"]}
    except (KeyError, TypeError, ValueError):
        return {}
