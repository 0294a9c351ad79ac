"""Launch sampling (``collection/launch_sampling.py``): a step profiled one launch per launch
configuration, read as every launch. On real H200 step reports (tests/fixtures/steps): the
report's first launch of each configuration stands for what a sampled ncu run holds, the
report's own launches for the pre-flight's list; expanded, the step must read as the whole
report does. Then what the pre-flight records (kineto's launch metadata), the ncu flags, and
the requests that cannot be sampled."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import ncu_report
import pytest
from pydantic import ValidationError

from nsight_agent.diagnose.places import clean_op, is_torch_range, places
from nsight_agent.diagnose.step_view import StepView, step_view
from nsight_agent.engine.collection import extract, launch_sampling, ncu_args
from nsight_agent.engine.collection.collect.choose import cold_reason
from nsight_agent.engine.collection.launch_sampling import PreLaunch, SamplingMismatch
from nsight_agent.engine.harness import gpu_activity, runtime
from nsight_agent.engine.harness.gpu_activity import CALL_PREFIX, attribute, launch_config
from nsight_agent.judge.reading import expanded
from nsight_agent.request import ProfileRequest
from nsight_agent.views.text import render_diagnosis
from tests.fakes import FakeAction
from tests.fixture_reports import unpacked
from tests.test_gpu_activity import _fake_profiler
from tests.test_worker_timer import Event

STEPS = Path(__file__).parent / "fixtures" / "steps"
REPORTS = ["step_tiny", "step_tiny_ho", "step_layer_ho", "step_chain", "step_chain_deep"]
DURATION = launch_sampling.DURATION


def _actions(name: str) -> list[Any]:
    return extract.iter_actions(extract.load(unpacked(STEPS / f"{name}.ncu-rep.xz")))


def _prelaunch(action: Any, ns: float | None = None) -> PreLaunch:
    """What the pre-flight would list for ``action``: its demangled name (kineto's is the
    demangled name too, spelt differently), grid, block and duration."""
    grid = launch_sampling._dims(action, launch_sampling.GRID)
    block = launch_sampling._dims(action, launch_sampling.BLOCK)
    assert grid is not None and block is not None
    name = action.name(ncu_report.IAction.NameBase_DEMANGLED)
    duration = float(action[DURATION].value()) if ns is None else ns
    ops = [n for names in extract.nvtx_ranges(action).values() for n in names if is_torch_range(n)]
    return PreLaunch(name, (*grid, *block, 0), duration, ops[0] if ops else None)


def _sampled(actions: list[Any]) -> list[Any]:
    """The first launch of each configuration: what ncu's per-launch-config filter keeps (as
    it did on the H200: one launch per bare name, grid and block)."""
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for a in actions:
        key = (a.name(), launch_sampling._shape(a))
        if key not in seen:
            seen.add(key)
            kept.append(a)
    return kept


def _step(actions: list[Any]) -> StepView:
    return step_view(actions, places(actions, [extract.nvtx_ranges(a) for a in actions]))


@pytest.mark.parametrize("name", REPORTS)
def test_a_sampled_step_expanded_reads_as_the_whole_report(name: str) -> None:
    full = _actions(name)
    sampled = _sampled(full)
    assert len(sampled) < len(full)  # each report repeats configurations
    every = launch_sampling.expand(sampled, [_prelaunch(a) for a in full])
    assert len(every) == len(full)
    for a, b in zip(full, every, strict=True):
        assert launch_sampling.base_name(a.name()) == launch_sampling.base_name(b.name())
        assert b[DURATION].value() == pytest.approx(a[DURATION].value())
    whole, read = _step(full), _step(every)
    assert read.gpu_us == pytest.approx(whole.gpu_us)
    assert read.launches == whole.launches
    assert [(g.group, g.launches) for g in read.groups] == [
        (g.group, g.launches) for g in whole.groups
    ]
    assert [g.share_pct for g in read.groups] == pytest.approx([g.share_pct for g in whole.groups])
    assert [c.id for c in read.causes or []] == [c.id for c in whole.causes or []]


def test_each_launch_is_scaled_by_its_own_preflight_duration() -> None:
    full = _actions("step_tiny")
    sampled = _sampled(full)
    first = float(sampled[0][DURATION].value())
    # The pre-flight saw every launch of the configuration take twice the first one's time.
    launches = [_prelaunch(full[0], 1000.0)] + [_prelaunch(a, 2000.0) for a in full[1:]]
    every = launch_sampling.expand(sampled, launches)
    assert every[0][DURATION].value() == first
    repeated = [x for x in every[1:] if isinstance(x, launch_sampling.SampledLaunch)]
    assert repeated and all(x.scale == 2.0 for x in repeated if x.action is sampled[0])
    assert repeated[0]["dram__bytes_read.sum"].value() == pytest.approx(
        2.0 * repeated[0].action["dram__bytes_read.sum"].value()
    )
    assert (
        repeated[0]["launch__grid_size"].value() == repeated[0].action["launch__grid_size"].value()
    )  # a launch's shape is not scaled


def test_a_launch_no_profiled_launch_stands_for_is_a_mismatch() -> None:
    full = _actions("step_layer_ho")
    sampled = _sampled(full)
    with pytest.raises(SamplingMismatch, match="has no profiled launch of its configuration"):
        launch_sampling.expand(sampled[:-1], [_prelaunch(a) for a in full])
    with pytest.raises(SamplingMismatch, match=r"the pre-flight.s list does not hold"):
        launch_sampling.expand(sampled, [_prelaunch(a) for a in full[:1]])
    other = [
        PreLaunch(p.name, (*p.config[:3], 999, 1, 1, 0) if p.config else None, p.ns)
        for p in (_prelaunch(a) for a in full)
    ]
    with pytest.raises(SamplingMismatch):
        launch_sampling.expand(sampled, other)  # another block size: not these launches


def test_an_unmapped_sample_is_read_as_profiled_and_says_so() -> None:
    full = _actions("step_chain")
    sampled = _sampled(full)
    actions, said = expanded(sampled, [_prelaunch(a) for a in full[:2]])
    assert actions == sampled and said is not None and said.startswith("launch-sampled, not mapped")
    actions, said = expanded(sampled, [_prelaunch(a) for a in full])
    assert len(actions) == len(full) and said is not None
    assert f"profiled {len(sampled)} of the call's {len(full)} launches" in said
    assert expanded(full, [_prelaunch(a) for a in full]) == (full, None)  # nothing repeated


@pytest.mark.parametrize(
    ("name", "bare"),
    [
        ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
         "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
         "vectorized_elementwise_kernel"),
        ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel"
         "<float, 4>(long, at::PhiloxCudaState)", "distribution_elementwise_grid_stride_kernel"),
        ("void cudnn::bn_fw_tr_1C11_singleread<float, 512, true, 1, 2, 0>(cudnnTensorStruct)",
         "bn_fw_tr_1C11_singleread"),
        ("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32", "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32"),
        ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
        ("void at::native::<unnamed>::conv_depthwise2d_forward_kernel_generic<c10::BFloat16, int>"
         "(torch::headeronly::detail::GenericPackedTensorAccessor<T1>)",
         "conv_depthwise2d_forward_kernel_generic"),  # ncu's spelling of an anonymous namespace
    ],
)  # fmt: skip
def test_bare_names_agree_between_cupti_and_ncu(name: str, bare: str) -> None:
    assert launch_sampling.base_name(name) == bare


def test_ncu_reports_spell_demangled_names_to_the_same_bare_name() -> None:
    for a in _actions("step_tiny_ho"):
        demangled = a.name(ncu_report.IAction.NameBase_DEMANGLED)
        assert launch_sampling.base_name(demangled) == launch_sampling.base_name(a.name())


# kineto's metadata of a kernel record (the shape torch 2.x writes: a JSON fragment)
METADATA = (
    '"queued": 0, "device": 0, "context": 1,\n  "stream": 7, "correlation": 8, '
    '"registers per thread": 32, "shared memory": 1024, "blocks per SM": 0.5, '
    '"warps per SM": 2, "grid": [128, 2, 1], "block": [256, 1, 1], '
    '"est. achieved occupancy %": 12'
)


def test_a_kernel_records_launch_configuration_is_read_from_kineto_metadata() -> None:
    assert launch_config(METADATA) == (128, 2, 1, 256, 1, 1, 1024)
    assert launch_config('"bytes": 4096, "memory bandwidth (GB/s)": 12.5') is None  # a copy


class MetaEvent(Event):
    def metadata_json(self) -> str:
        return METADATA if self.dev == "CUDA" else ""


def test_the_preflight_lists_each_launch_with_its_configuration_in_gpu_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = [
        MetaEvent(f"{CALL_PREFIX}0", "CPU", 0, 10_000),
        MetaEvent("cudaLaunchKernel", "CPU", 100, 10, corr=5),
        MetaEvent("cudaLaunchKernel", "CPU", 150, 10, corr=6),
        MetaEvent("cudaMemcpyAsync", "CPU", 200, 10, corr=7),
        MetaEvent("second", "CUDA", 2_000, 300, corr=6),
        MetaEvent("first", "CUDA", 1_000, 500, corr=5),
        MetaEvent("Memcpy DtoD (Device -> Device)", "CUDA", 2_600, 300, corr=7),
    ]
    _fake_profiler(monkeypatch, events)
    launches: list[list[Any]] = []
    out, kernels, _ = runtime.call_counting_kernels(lambda: 1, (), "cuda", launches)
    assert out == 1 and sorted(kernels or []) == ["first", "second"]
    config = [128, 2, 1, 256, 1, 1, 1024]
    assert launches == [["first", config, 500, None], ["second", config, 300, None]]
    # Timing a call reads no configuration: the regex is not paid per record there.
    assert all(a.config is None for a in attribute(events).calls[0])
    manifest = {"calls": [{"call": 0, "launches": launches}, {"call": 1}]}
    assert launch_sampling.preflight_launches(manifest) == [
        PreLaunch("first", tuple(config), 500.0),
        PreLaunch("second", tuple(config), 300.0),
    ]
    assert launch_sampling.preflight_launches({"calls": [{"call": 0, "kernels": []}]}) is None


def test_sampling_asks_ncu_for_one_launch_per_configuration_and_runs_cold() -> None:
    options = ncu_args.NcuOptions(sections=["SpeedOfLight"], sample_launches=True)
    argv = ncu_args.collection_args(options)
    at = argv.index("--filter-mode")
    assert argv[at : at + 4] == ["--filter-mode", "per-launch-config", "--launch-count", "1"]
    assert "--filter-mode" not in ncu_args.collection_args(ncu_args.NcuOptions())
    reason = cold_reason(ncu_args.NcuOptions(sample_launches=True))
    assert reason is not None and "launch sampling" in reason


def test_only_one_measured_call_can_be_sampled() -> None:
    base = {"source": "def run(x): return x\ndef setup(n): return (n,)\n", "configs": [{"n": 1}]}
    assert ProfileRequest(**base, runs=1, sample_launches=True).sample_launches
    for extra in ({"runs": 2}, {"runs": 1, "configs": [{"n": 1}, {"n": 2}]}):
        with pytest.raises(ValidationError, match="sample_launches weighs one measured call"):
            ProfileRequest(**(base | extra), sample_launches=True)


@dataclass
class OpEvent(Event):
    """A kineto event with a thread and recorded input sizes."""

    thread: int = 1
    sizes: list[list[int]] | None = None

    def start_thread_id(self) -> int:
        return self.thread

    def shapes(self) -> list[list[int]] | None:
        return self.sizes


def test_each_launch_is_placed_in_the_outermost_torch_operator_of_its_thread() -> None:
    events = [
        OpEvent("aten::linear", "CPU", 100, 100, sizes=[[8, 4], [2, 4]]),
        OpEvent("aten::addmm", "CPU", 110, 50),  # inside linear: not the group
        OpEvent("cudaLaunchKernel", "CPU", 120, 5, corr=1),
        OpEvent("aten::relu", "CPU", 300, 20),
        OpEvent("cudaLaunchKernel", "CPU", 305, 5, corr=2),
        OpEvent("cudaLaunchKernel", "CPU", 400, 5, corr=3),  # outside any operator
        OpEvent("aten::add", "CPU", 90, 400, thread=2),  # another thread's: not theirs
        OpEvent("cudaLaunchKernel", "CPU", 450, 5, corr=4, thread=2),
    ]
    assert gpu_activity.outer_ops(events) == {
        1: "aten::linear, sizes = [[8, 4], [2, 4]]",
        2: "aten::relu",
        4: "aten::add",
    }
    # the label reads as torch's own NVTX range does in the step view
    assert clean_op("aten::linear, sizes = [[8, 4], [2, 4]]") == "aten::linear [[8, 4], [2, 4]]"


def test_launch_configurations_come_from_kinetos_trace_where_its_events_hold_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On the H200 the events' metadata held no grid for the kernels of a cuDNN convolution;
    # kineto's Chrome trace writes each kernel's grid, block and correlation id.
    trace = {
        "traceEvents": [
            {"cat": "kernel", "name": "conv", "args": {"correlation": 5, "grid": [4, 2, 1],
             "block": [128, 1, 1], "shared memory": 4096}},
            {"cat": "gpu_memcpy", "name": "Memcpy", "args": {"correlation": 7}},
            {"cat": "cpu_op", "name": "aten::conv2d", "args": {}},
        ]
    }  # fmt: skip
    assert gpu_activity.configs_of_trace(trace) == {5: (4, 2, 1, 128, 1, 1, 4096)}
    events = [
        Event(f"{CALL_PREFIX}0", "CPU", 0, 10_000),
        Event("cudaLaunchKernel", "CPU", 100, 10, corr=5),
        Event("conv", "CUDA", 1_000, 500, corr=5),
    ]

    class Profiler(SimpleNamespace):
        def export_chrome_trace(self, path: str) -> None:
            Path(path).write_text(json.dumps(trace))

    @contextlib.contextmanager
    def profile(cpu: bool = True, shapes: bool = False) -> Iterator[Any]:
        yield Profiler(kineto_results=SimpleNamespace(events=lambda: events))

    monkeypatch.setattr(runtime, "kineto_profiler", profile)
    monkeypatch.setattr(runtime, "synchronize", lambda device: None)
    launches: list[list[Any]] = []
    runtime.call_counting_kernels(lambda: 1, (), "cuda", launches)
    assert launches == [["conv", [4, 2, 1, 128, 1, 1, 4096], 500, None]]


def _fake(name: str, grid: int, ns: float) -> FakeAction:
    dims = dict(zip(launch_sampling.GRID, (grid, 1, 1), strict=True))
    dims |= dict(zip(launch_sampling.BLOCK, (512, 1, 1), strict=True))
    return FakeAction(dims | {DURATION: ns}, name=name)


def test_the_map_follows_what_ncu_told_apart_as_seen_on_the_h200() -> None:
    # ResNet's step on the H200: ncu profiled one cuDNN batch norm per shared-memory size,
    # and one elementwise launch for two functors (add, mul) with one grid.
    bn = "void cudnn::bn_fw_tr_1C11_singleread<float, 512, true, 1, 2, 0>(cudnnTensorStruct)"
    add = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"
    )
    mul = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>(int)"
    shape = (64, 1, 1, 512, 1, 1)
    launches = [
        PreLaunch(bn, (*shape, 144), 100.0, "aten::batch_norm, sizes = [[2, 64]]"),
        PreLaunch(add, (*shape, 0), 10.0, "aten::add"),
        PreLaunch(bn, (*shape, 288), 300.0, "aten::batch_norm, sizes = [[2, 128]]"),
        PreLaunch(mul, (*shape, 0), 20.0, "aten::mul"),
        PreLaunch(bn, (*shape, 144), 110.0, "aten::batch_norm, sizes = [[2, 64]]"),
    ]
    profiled = [
        _fake("bn_fw_tr_1C11_singleread", 64, 1000.0),
        _fake("vectorized_elementwise_kernel", 64, 50.0),
        _fake("bn_fw_tr_1C11_singleread", 64, 3000.0),
    ]
    every = launch_sampling.expand(profiled, launches)
    assert [x if not isinstance(x, launch_sampling.SampledLaunch) else x.action for x in every] == [
        profiled[0],
        profiled[1],
        profiled[2],
        profiled[1],
        profiled[0],
    ]
    assert every[3][DURATION].value() == pytest.approx(100.0)  # 50 x 20/10
    assert every[3].own_op == "aten::mul"  # grouped under its own operator
    assert every[4][DURATION].value() == pytest.approx(1100.0)  # 1000 x 110/100
    assert every[4].own_op is None
    with pytest.raises(SamplingMismatch, match=r"the pre-flight.s list does not hold"):
        launch_sampling.expand([*profiled, _fake("bn_fw_tr_1C11_singleread", 64, 9.0)], launches)


def test_the_diagnosis_of_a_report_says_how_its_launches_were_read() -> None:
    from nsight_agent.service.diagnose import diagnose_file

    path = unpacked(STEPS / "step_chain.ncu-rep.xz")
    full = _actions("step_chain")
    plain = diagnose_file(path)
    same = diagnose_file(path, launches=[_prelaunch(a) for a in full])
    assert same.sampled is None and same.step is not None and plain.step is not None
    assert same.step.model_dump() == plain.step.model_dump()
    other = diagnose_file(path, launches=[_prelaunch(a) for a in full[:3]])
    assert other.sampled is not None and "not mapped" in other.sampled
    assert other.step is not None and other.step.launches == len(full)
    assert "not mapped" in render_diagnosis(other)


def test_kinetos_trace_is_read_once_and_only_for_kernels_whose_metadata_holds_no_grid() -> None:
    events = [
        Event(f"{CALL_PREFIX}0", "CPU", 0, 10_000),
        Event("cudaLaunchKernel", "CPU", 100, 10, corr=5),
        Event("cudaLaunchKernel", "CPU", 150, 10, corr=6),
        Event("cudaMemcpyAsync", "CPU", 200, 10, corr=7),
        Event("a", "CUDA", 1_000, 500, corr=5),
        Event("b", "CUDA", 2_000, 300, corr=6),
        Event("Memcpy DtoD (Device -> Device)", "CUDA", 2_600, 300, corr=7),
    ]
    asked: list[int] = []

    def known() -> dict[int, tuple[int, ...]]:
        asked.append(1)
        return {5: (1, 1, 1, 32, 1, 1, 0), 6: (2, 1, 1, 32, 1, 1, 0)}

    found = attribute(events, configs=True, known=known)
    assert [a.config for a in found.calls[0]] == [
        (1, 1, 1, 32, 1, 1, 0),
        (2, 1, 1, 32, 1, 1, 0),
        None,
    ]
    assert asked == [1]
    copies_only = [e for e in events if e.corr != 5 and e.corr != 6]
    attribute(copies_only, configs=True, known=known)
    assert asked == [1]  # a copy has no grid to look up
