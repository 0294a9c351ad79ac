"""A job that asked for torch operator ranges (diagnose_kernel) served by a pre-launched target
when the pre-flight shows its calls launch only the source's own kernels
(``engine/collection/collect/plain.py``): the decision on the pre-flight's kernel lists, then
the whole pipeline through the stand-in ncu and a real target on the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nsight_agent.engine import pipeline
from nsight_agent.engine.collection import preflight_run
from nsight_agent.engine.collection.collect import plain
from nsight_agent.engine.collection.collect.attached import Attached
from nsight_agent.engine.collection.collect.choose import choose
from nsight_agent.engine.collection.collect.early import ENV, Early
from nsight_agent.engine.collection.collect.plain import PlainServed
from nsight_agent.engine.executors.local import LocalExecutor
from nsight_agent.engine.harness import program_io
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.request import ProfileRequest
from nsight_agent.source_kernels import defined_in
from tests.fakes import FakeSlot
from tests.test_engine_targets import (  # noqa: F401 - stand_in is a fixture
    KERNELS,
    calls,
    ready_pool,
    stand_in,
    sweep_request,
)

# The stand-in ncu's kernels, defined in the source as CUDA strings (what user_kernel_names
# reads in a load_inline source).
DEFINES = (
    '\nCUDA = "__global__ void add_kernel(float* x) {} __global__ void scale_kernel(float* x) {}"\n'
)


def diagnosing(**fields: Any) -> ProfileRequest:
    """What diagnose_kernel asks for: operator ranges, one config's calls sampled."""
    req = sweep_request(torch_ranges=True, **fields)
    return req.model_copy(update={"source": req.source + DEFINES})


def counted(per_call: dict[str, list[list[str]]]) -> PreflightResult:
    return PreflightResult(ok=True, device="cuda", seconds=0.1, kernels_per_call=per_call)


OWN = {v: [KERNELS[v]] * 3 for v in KERNELS}


def test_only_the_sources_own_kernels_in_few_launches_are_served_plainly() -> None:
    req = diagnosing()
    way = choose(req, FakeSlot(), {})
    assert isinstance(way, PlainServed) and way.own_kernels == {"add_kernel", "scale_kernel"}
    assert not way.job.as_plain().op_ranges and not way.job.as_plain().options.sample_launches
    assert way.why.startswith("torch operator ranges")  # where the pre-flight says no
    assert plain.only_own_kernels(counted(OWN), way.own_kernels)
    sampled = req.model_copy(update={"configs": [{"n": 4096}], "variants": req.variants[:1]})
    sampled = sampled.model_copy(update={"sample_launches": True})
    assert isinstance(choose(sampled, FakeSlot(), {}), PlainServed)
    aten = {"triton_add": [["add_kernel", "vectorized_elementwise_kernel<4>"]]}
    many = {"triton_add": [["add_kernel"] * (plain.PLAIN_MAX_LAUNCHES + 1)]}
    for pre in (counted(aten), counted(many), counted({}), counted({"triton_add": [[]]})):
        assert not plain.only_own_kernels(pre, way.own_kernels), pre.kernels_per_call
    # A target still starting: the early cold start, unless it is off (then the pre-flight's
    # end decides, as a ready one would).
    assert isinstance(choose(req, FakeSlot(ready=False), {}), Early)
    assert isinstance(choose(req, FakeSlot(ready=False), {ENV: "0"}), PlainServed)
    assert isinstance(choose(req, None, {}), Early)
    assert isinstance(choose(sweep_request(torch_ranges=True), FakeSlot(), {}), Early)
    ranged = diagnosing(replay_mode="range")  # cold for another reason: nothing to gain
    assert isinstance(choose(ranged, FakeSlot(), {}), Early)
    assert isinstance(choose(sweep_request(), FakeSlot(), {}), Attached)  # as it is


def test_a_profiler_spells_the_sources_kernels_the_same() -> None:
    names = {"add_kernel", "col_gather"}
    assert defined_in("add_kernel", names)
    assert defined_in("void add_kernel<float>(float*, int)", names)
    assert not defined_in("void at::native::vectorized_elementwise_kernel<4>(int)", names)


def test_the_harness_can_leave_the_operator_ranges_out() -> None:
    assert program_io.parse_args(["--device", "cpu"]).op_ranges
    assert not program_io.parse_args(["--device", "cpu", "--no-op-ranges"]).op_ranges


def test_a_diagnosis_whose_calls_launch_only_its_kernels_goes_through_the_target(
    stand_in: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The pipeline waits for the pre-flight (no early cold start), drops the ranges and runs
    on the ready target, and says so; with an ATen kernel among the calls' it runs cold."""
    seen: dict[str, list[list[str]]] = OWN

    def preflight(run_dir: Path, request: ProfileRequest, where: str) -> PreflightResult:
        pre = preflight_run.run_preflight(run_dir, request, where, poll=lambda: None)
        pre.kernels_per_call = seen  # what CUPTI counts on a GPU (the CPU counts none)
        return pre

    root = tmp_path / "runs"
    with LocalExecutor(["cpu"], targets=1) as executor:
        pool = ready_pool(executor)
        run = pipeline.profile(diagnosing(), runs_root=root, preflight=preflight, targets=pool)
        assert run.facts.collection == "pre-launched"
        assert run.facts.collected_plain == plain.SAID
        assert run.kernels == KERNELS and all(c.ok for c in run.checks)
        assert pool.wait_ready(180), pool.info()
        seen = {"triton_add": [["add_kernel", "vectorized_elementwise_kernel<4>"]]}
        cold = pipeline.profile(diagnosing(), runs_root=root, preflight=preflight, targets=pool)
    assert cold.facts.collection.startswith("cold: torch operator ranges")
    assert cold.facts.collected_plain is None
    assert len(calls(stand_in, "attach")) == 1 and cold.kernels == KERNELS


TRITON_ADD = Path(__file__).resolve().parents[1] / "examples" / "contract" / "triton_vector_add.py"


@pytest.mark.gpu
def test_on_a_gpu_a_triton_kernels_diagnosis_runs_on_the_target_as_a_cold_one_reads(
    tmp_path: Path,
) -> None:
    """diagnose_kernel from source of one Triton kernel (operator ranges and launch sampling
    asked for, as the tool does): served by the slot's target without them, and the same
    kernel, bound and first cause as a cold run's.

    64 Mi floats (768 MB moved, ~0.2 ms on either GPU): at 4 Mi (48 MB, ~10 us) an H200
    read one of the two runs latency-bound and the other memory-bound. A kernel that short
    sits too near the 60 % line between them, and is too open to other tests' GPU work, for
    its bound to be compared."""
    from nsight_agent.service.diagnose import diagnose_source
    from nsight_agent.service.measure import Measuring
    from nsight_agent.service.runs import load_run

    fields = {
        "source": TRITON_ADD.read_text(),
        "language": "triton",
        "configs": [{"n": 1 << 26}],
        "variants": [{"name": "triton", "entry": "run"}],
    }
    with LocalExecutor(["0"], targets=1) as executor:
        executor.start_targets()
        pool = executor.target_pool("0")
        assert pool is not None and pool.wait_ready(120), pool and pool.info()
        warm = diagnose_source(fields, Measuring(tmp_path, executor))
    cold = diagnose_source(fields, Measuring(tmp_path))
    served = load_run(str(warm.run_id), runs_root=tmp_path)
    assert served.facts.collection == "pre-launched", served.facts.collection
    assert served.facts.collected_plain == plain.SAID and warm.sampled is None
    assert load_run(str(cold.run_id), runs_root=tmp_path).facts.collection.startswith("cold")
    (w,), (c,) = warm.kernels, cold.kernels
    assert w.diagnosis.kernel == c.diagnosis.kernel == "add_kernel"
    # The bound and what decided it, not the headline: its percent of the roof moves by a
    # point between two runs of the same kernel (91 % against 92 % on an H100).
    bounds = [(k.diagnosis.bound.bound, k.diagnosis.bound.basis) for k in (w, c)]
    assert bounds[0] == bounds[1], (w.diagnosis.headline, c.diagnosis.headline)
    causes = [[x.id for x in k.diagnosis.causes][:1] for k in (w, c)]
    assert causes[0] == causes[1], (w.diagnosis.headline, c.diagnosis.headline)
