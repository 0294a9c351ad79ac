"""ncu's command lines: what a request asks ncu for (``NcuOptions``) and the argv of a cold run,
a launch (``ncu --mode launch``) and an attach (``ncu --mode attach``), as lists, never a shell
string. Nothing here runs ncu (``ncu.py`` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import get_args

from nsight_agent.annotation import NCU_NVTX_INCLUDE
from nsight_agent.engine.collection import launch_sampling
from nsight_agent.errors import InvalidRequestError
from nsight_agent.options import TIME_METRIC, CacheControl, ClockControl, ReplayMode

SOURCE_SECTION = "SourceCounters"  # per-instruction counters, correlated to source lines


def check_choice(name: str, value: object, literal: object) -> None:
    """Re-check a Literal option at run time: type hints do not stop a wrong string."""
    choices = get_args(literal)
    if value not in choices:
        raise InvalidRequestError(
            f"{name} must be one of {', '.join(map(repr, choices))}; got {value!r}",
            f"Pass {name}={choices[0]!r} (the default) or another listed value.",
        )


@dataclass(frozen=True)
class NcuOptions:
    """What to collect and how: the part of a request that becomes ncu flags."""

    metrics: Sequence[str] = (TIME_METRIC,)
    sections: Sequence[str] = ()
    replay_mode: ReplayMode = "kernel"
    cache_control: CacheControl = "all"
    clock_control: ClockControl = "none"
    nvtx_include: Sequence[str] = (NCU_NVTX_INCLUDE,)
    extra_args: Sequence[str] = field(default_factory=tuple)
    sample_launches: bool = False  # one launch per launch configuration (launch_sampling.py)

    def __post_init__(self) -> None:
        check_choice("replay_mode", self.replay_mode, ReplayMode)
        check_choice("cache_control", self.cache_control, CacheControl)
        check_choice("clock_control", self.clock_control, ClockControl)
        if not self.metrics and not self.sections:
            raise InvalidRequestError(
                "no metrics and no sections requested",
                "Ask for at least one metric, e.g. gpu__time_duration.sum.",
            )
        for m in self.metrics:
            if not m or m.startswith("-") or "," in m or any(c.isspace() for c in m):
                raise InvalidRequestError(
                    f"malformed metric name {m!r}",
                    "Give one metric per list entry, without spaces, commas or leading dashes.",
                )


def build_argv(
    ncu: str, options: NcuOptions, report_base: Path, log_path: Path, target: Sequence[str]
) -> list[str]:
    """The exact ncu command line for one collection run."""
    argv = [ncu, "--force-overwrite", "--export", str(report_base), "--log-file", str(log_path)]
    argv += ["--print-summary", "none", "--target-processes", "all"]
    argv += nvtx_args(options.nvtx_include)
    return [*argv, *collection_args(options), *target]


def nvtx_args(nvtx_include: Sequence[str]) -> list[str]:
    """The NVTX filter: ``--nvtx`` and one ``--nvtx-include`` per expression."""
    return (["--nvtx"] if nvtx_include else []) + [
        a for e in nvtx_include for a in ("--nvtx-include", e)
    ]


def collection_args(options: NcuOptions) -> list[str]:
    """What to collect and how: replay, cache and clock control, metrics, sections."""
    argv = ["--replay-mode", options.replay_mode, "--cache-control", options.cache_control]
    argv += ["--clock-control", options.clock_control]
    if options.metrics:
        argv += ["--metrics", ",".join(options.metrics)]
    for section in options.sections:
        argv += ["--section", section]
    if SOURCE_SECTION in options.sections:
        # The source lines' text goes into the report: hot lines show the code, a library's
        # inlined code is matched to the user's call (diagnose/call_sites.py), and the report
        # stays readable after the run folder is trimmed.
        argv += ["--import-source", "yes"]
    argv += list(launch_sampling.NCU_ARGS) if options.sample_launches else []
    return argv + list(options.extra_args)


# Pre-launched targets (worker/targets.py, collection/collect/attach.py): the report, metrics
# and replay options go on the attach; each target listens on its own block of ports.
ATTACH_HOST = "127.0.0.1"


def launch_argv(ncu: str, port: int, nvtx: bool, target: Sequence[str]) -> list[str]:
    """``ncu --mode launch``: start ``target``, suspended at its first CUDA call until an
    attach on ``port`` connects; ``nvtx``: add --nvtx (the pool drops it where ncu refuses it)."""
    return [ncu, "--mode", "launch", "--port", str(port), *(["--nvtx"] if nvtx else []), *target]


def attach_argv(ncu: str, options: NcuOptions, port: int, report_base: Path) -> list[str]:
    """``ncu --mode attach``: profile the target on ``port`` until it exits, inside its
    profiler ranges only (one per measured call with its markers: harness/call_markers.py)."""
    head = [ncu, "--mode", "attach", "--hostname", ATTACH_HOST, "--port", str(port)]
    head += ["--profile-from-start", "off", "--force-overwrite", "--export", str(report_base)]
    return [*head, *collection_args(options)]
