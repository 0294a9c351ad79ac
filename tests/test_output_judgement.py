"""Wrong outputs judged the same on both methods, run for real on the CPU: an entry that
returns a string, None, NaN, Inf, the wrong shape or the wrong dtype, as the baseline alone
and as a candidate beside an honest baseline.

Each request goes through the ncu path's pre-flight (``pipeline.preflight``, then
``raise_if_broken``: what runs before ncu), the warm timing worker's own loop
(``timing_run.time_run_dir``, no pre-flight before it) and the timing method end to end
(``pipeline.time_request`` on a ``WorkerPool``). The rule (``harness/verdicts.py``): the
baseline's invalid output fails the request at stage ``check`` with the check's message; a
candidate's invalid or mismatching output makes it ``incorrect`` with the check's reason
and message, and it gets no speedup.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nsight_agent.engine import pipeline
from nsight_agent.engine.collection.preflight_run import raise_if_broken
from nsight_agent.engine.harness import render
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.store.records import DroppedVariant
from nsight_agent.engine.store.runs import OutputCheck
from nsight_agent.engine.worker import timing_run
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.engine.worker.timing_options import TimingOptions
from nsight_agent.request import ProfileRequest
from nsight_agent.service.summaries import compare_summary

SOURCE = """import torch

def setup(n, device):
    return (torch.ones(n, device=device),)

def good(x):
    return x * 2

def bad(x):
    {body}
"""
NOT_TENSORS = "an entry must return a tensor, or a tuple/list/dict of tensors; got "
# (the entry's body, the check's reason, its message)
OUTPUTS = {
    "string": ("return 'done'", "structure", NOT_TENSORS + "str"),
    "none": ("return None", "structure", NOT_TENSORS + "NoneType"),
    "nan": ("return x * float('nan')", "nonfinite", "out holds 64 NaN"),
    "inf": ("return x * float('inf')", "nonfinite", "out holds 64 Inf"),
    "shape": ("return (x * 2)[:-1]", "shape", "out has shape (63,), baseline (64,)"),
    "dtype": (
        "return (x * 2).double()",
        "dtype",
        "out has dtype torch.float64, baseline torch.float32",
    ),
}
FAST = TimingOptions(min_runs=3, max_runs=3, warmup_min=1, warmup_max=2)
Judgement = tuple[str, str | None, str]  # (what happened, stage or reason, message)


def request(kind: str, alone: bool) -> ProfileRequest:
    fields: dict[str, object] = {
        "source": SOURCE.format(body=OUTPUTS[kind][0]),
        "language": "torch",
        "configs": {"n": [64]},
        "runs": 2,
        "warmup": 1,
    }
    if alone:
        fields["entry"] = "bad"
    else:
        variants = [{"name": "good", "entry": "good"}, {"name": "bad", "entry": "bad"}]
        fields.update(variants=variants, baseline="good")
    return ProfileRequest.model_validate(fields)


def candidate(dropped: dict[str, DroppedVariant], checks: list[OutputCheck]) -> Judgement:
    """The candidate 'bad''s verdict: dropped as incorrect, or measured with a failed check."""
    if "bad" in dropped:
        d = dropped["bad"]
        return d.verdict, d.reason, d.message
    failed = [c for c in checks if c.variant == "bad" and not c.ok]
    if failed:
        return "incorrect", failed[0].reason, failed[0].message
    return "ok", None, ""


def failed_request(err: SourceError) -> Judgement:
    return "request fails", err.stage, err.detail


def by_preflight(req: ProfileRequest, root: Path) -> Judgement:
    pre = pipeline.preflight(req, runs_root=root, device="cpu")
    try:
        raise_if_broken(pre)
    except SourceError as err:
        return failed_request(err)
    return candidate(pre.dropped, pre.checks)


def by_timing_loop(req: ProfileRequest, root: Path) -> Judgement:
    run_dir = root / "timed"
    run_dir.mkdir(parents=True)
    render.write_run_files(req, run_dir, root / ".cuda-cache")
    try:
        result = timing_run.time_run_dir(run_dir, "cpu", FAST)
    except SourceError as err:
        return failed_request(err)
    return candidate(result.dropped, [OutputCheck(**c) for c in result.checks])


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    with WorkerPool() as p:
        yield p


@pytest.mark.parametrize("kind", ["string", "none", "nan", "inf"])
def test_the_baselines_invalid_output_fails_the_request_at_check_on_both_methods(
    kind: str, tmp_path: Path, pool: WorkerPool
) -> None:
    req = request(kind, alone=True)
    expected = ("request fails", "check", OUTPUTS[kind][2])
    assert by_preflight(req, tmp_path / "ncu") == expected
    assert by_timing_loop(req, tmp_path / "loop") == expected
    with pytest.raises(SourceError) as raised:
        pipeline.time_request(req, pool, runs_root=tmp_path / "timing", device="cpu")
    assert failed_request(raised.value) == expected


@pytest.mark.parametrize("kind", list(OUTPUTS))
def test_a_candidates_invalid_output_makes_it_incorrect_with_its_reason_on_both_methods(
    kind: str, tmp_path: Path, pool: WorkerPool
) -> None:
    req = request(kind, alone=False)
    _, reason, message = OUTPUTS[kind]
    expected = ("incorrect", reason, message)
    assert by_preflight(req, tmp_path / "ncu") == expected
    assert by_timing_loop(req, tmp_path / "loop") == expected
    run = pipeline.time_request(req, pool, runs_root=tmp_path / "timing", device="cpu")
    assert candidate(run.dropped, run.checks) == expected
    summary = compare_summary(run)
    assert summary.overall["bad"].verdict == "incorrect"
    assert summary.overall["bad"].geomean_speedup is None
    shown = summary.configs[0].variants["bad"]
    assert shown.speedup is None and shown.check is not None and message in shown.check


# --- on the GPU: the ncu run itself beside the timing method -----------------------------------


@pytest.fixture(scope="module")
def gpu_pool() -> Iterator[WorkerPool]:
    with WorkerPool() as p:
        yield p


def by_ncu(req: ProfileRequest, root: Path) -> Judgement:
    try:
        run = pipeline.profile(req, runs_root=root)
    except SourceError as err:
        return failed_request(err)
    return candidate(run.dropped, run.checks)


def by_timing(req: ProfileRequest, root: Path, pool: WorkerPool) -> Judgement:
    try:
        run = pipeline.time_request(req, pool, runs_root=root, device="cuda")
    except SourceError as err:
        return failed_request(err)
    return candidate(run.dropped, run.checks)


@pytest.mark.gpu
@pytest.mark.parametrize("alone", [True, False], ids=["baseline", "candidate"])
@pytest.mark.parametrize("kind", list(OUTPUTS))
def test_the_ncu_run_and_the_timing_method_judge_alike_on_the_gpu(
    kind: str, alone: bool, tmp_path: Path, gpu_pool: WorkerPool
) -> None:
    """Under ncu (pre-flight and the profiled process) and on a CUDA warm worker: the same
    judgement and message as on the CPU (a string or None launches no kernel, and is still
    judged by its outputs first)."""
    if alone and kind in ("shape", "dtype"):
        pytest.skip("a baseline alone has nothing to compare its shape or dtype with")
    req = request(kind, alone)
    _, reason, message = OUTPUTS[kind]
    expected = ("request fails", "check", message) if alone else ("incorrect", reason, message)
    assert by_ncu(req, tmp_path / "ncu") == expected
    assert by_timing(req, tmp_path / "timing", gpu_pool) == expected
