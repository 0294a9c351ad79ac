"""The rendered harness under ncu, every (variant, config, run) call in one process, launched
cold (``ncu python harness.py``) or handed to a pre-launched target (``attach.py``); the
report, the manifest and the logs land in the run folder. The ways of collecting (``cold.py``,
``early.py``, ``attached.py``, ``plain.py``) choose which; both read their outcome alike.

A profiled process that raised is the user's error with its stage and line (from error.json);
one that ended early (``os._exit``) is named as such, not as "no kernels"; one cut by its
limit says what the pre-flight's kernel counts would need at the pace ncu kept.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

from nsight_agent.engine import process
from nsight_agent.engine.collection import ncu, preflight_run
from nsight_agent.engine.collection.call_markers import KernelCounts
from nsight_agent.engine.collection.collect import attach
from nsight_agent.engine.collection.collect.strategy import (
    PRELAUNCHED,
    Collected,
    CollectJob,
    RunPlace,
)
from nsight_agent.engine.collection.ncu_log import NcuRun
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.store.run_files import RunFiles
from nsight_agent.errors import (
    CollectionTimeoutError,
    KernelProfileFailedError,
    NcuError,
    NoKernelsProfiledError,
    ProfiledProcessError,
)


def cold(
    job: CollectJob,
    run: RunPlace,
    why: str,
    *,
    skip: Sequence[str] = (),
    expected: KernelCounts | None = None,
    gate: Path | None = None,
) -> Collected:
    """A cold launch: ``ncu python harness.py`` in the run folder; ``skip``: variants the
    pre-flight dropped; ``gate``: started beside the pre-flight, the harness waits for its
    verdict in this file (``early.py``), and the limit covers both stages; ``why``: what the
    answer says of the cold path."""
    limit = job.timeout_s * (2 if gate is not None else 1)
    files = RunFiles.in_folder(run.run_dir)
    inv = ncu.Invocation(job.options, files, limit, run.poll, tag=f"{run.run_id}.ncu")
    with _outcome(job, files, skip, expected):
        done = ncu.profile_cold(
            [process.python_executable(), *harness_argv(job, skip, gate)],
            inv,
            cwd=run.run_dir,
            env=process.child_env(),
            forget=lambda: forget_attempt(run.run_dir),
        )
    return Collected(done.seconds, f"cold: {why}{waits(done)}")


def attached(
    job: CollectJob,
    run: RunPlace,
    target: attach.Prelaunched,
    *,
    skip: Sequence[str],
    expected: KernelCounts | None,
) -> Collected:
    """The harness handed to ``target`` with ncu attached; ``expected``: the pre-flight's
    kernels per call, which the run's call markers must bracket. Raises
    ``attach.AttachFailed`` where the attach itself failed (the caller goes cold)."""
    files = RunFiles.in_folder(run.run_dir)
    inv = ncu.Invocation(job.options, files, job.timeout_s, run.poll, tag=f"{run.run_id}.attach")
    with _outcome(job, files, skip, expected):
        done = attach.profile_prelaunched(
            target,
            inv,
            argv=harness_argv(job, skip),
            run_dir=run.run_dir,
            expected=expected,
        )
    return Collected(done.seconds, PRELAUNCHED + waits(done))


def harness_argv(job: CollectJob, skip: Sequence[str], gate: Path | None = None) -> list[str]:
    """``harness.py`` as the collect stage runs it: on the GPU, without the dropped variants,
    waiting at ``gate`` if given, without the torch operator ranges of a plain job."""
    argv = ["harness.py", "--device", "cuda"] + (["--skip", ",".join(skip)] if skip else [])
    argv += ["--gate", str(gate)] if gate is not None else []
    return argv + (["--no-op-ranges"] if job.plain else [])


@contextlib.contextmanager
def _outcome(
    job: CollectJob, files: RunFiles, skip: Sequence[str], expected: KernelCounts | None
) -> Iterator[None]:
    """A profiled run's failure as the error the user can act on; a run that passed but whose
    manifest lacks calls ended early (no exit status is trusted)."""
    try:
        yield
    except ProfiledProcessError as err:
        raise preflight_run.source_error(files.error, err.stderr_tail, err.returncode) from err
    except KernelProfileFailedError:
        raise  # ncu ended the program: its calls are short, and that is not the source's doing
    except CollectionTimeoutError as err:
        raise with_estimate(err, expected, job.runs, skip) from None
    except (NoKernelsProfiledError, NcuError) as err:
        # An early exit (os._exit at import or in the entry) looks like "no kernels".
        early = ended_early(files.manifest, job)
        if early is not None:
            raise early from err
        raise
    early = ended_early(files.manifest, job)
    if early is not None:
        raise early


def with_estimate(
    err: CollectionTimeoutError,
    expected: KernelCounts | None,
    runs: int,
    skip: Sequence[str],
    spent_s: float | None = None,
) -> CollectionTimeoutError:
    """A run cut by its limit, with the kernels it had to profile (the pre-flight's count per
    call, times the runs; counted on a GPU only) and the limit they need at the pace ncu kept
    (the sweep's level-3 steps launch hundreds of kernels a call, each replayed per pass);
    ``spent_s``: the seconds it could profile (started beside the pre-flight: since the
    verdict), else its whole limit."""
    total = sum(n for (variant, _), n in (expected or {}).items() if variant not in skip) * runs
    done = err.profiled
    if not done or total <= done:
        return err
    spent = err.limit_s if spent_s is None else min(spent_s, err.limit_s)
    need = math.ceil(spent * total / done / 30) * 30  # its start counted in: an upper end
    err.reword(
        f"{err.message} The measured calls launch {total} kernels in all (the pre-flight's "
        f"count per call, times {runs} runs): at that pace about {need} s.",
        f"Raise timeout_s to about {need}, or profile less: fewer runs or configs, fewer "
        f"sections (deep=false), or method='timing' where no counters are needed. {err.hint}",
    )
    return err


def waits(done: NcuRun) -> str:
    """What another profiler on the GPU cost this run, said beside the path."""
    said = ""
    if done.waited_s >= 0.5:
        said += f"; waited {done.waited_s:.0f} s for the GPU's profiler (another process had it)"
    if done.attempts > 1:
        said += f"; profiled on attempt {done.attempts} (another profiler held the counters)"
    return said


def forget_attempt(run_dir: Path) -> None:
    """Remove what a failed attempt's harness left (an attach, or a cold run that met a busy
    profiler), before the next run writes its own (a stale error.json would be read as its)."""
    files = RunFiles.in_folder(run_dir)
    for path in (files.report, files.manifest, files.error, files.progress):
        path.unlink(missing_ok=True)


def ended_early(manifest: Path, job: CollectJob) -> SourceError | None:
    """Trust no exit status: a run whose manifest lacks calls ended early."""
    found = preflight_run.read_manifest(manifest)
    return preflight_run.early_exit(found, job.variants, job.configs, job.runs, 0)
