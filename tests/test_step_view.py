"""The step view (issue 23): owners, owner-aware advice, never-silent kernels, precision
labels, step-level causes, on real H200 reports of whole steps and on hand-built launches.

``tests/fixtures/steps/`` holds xz-compressed reports recorded with ``scripts/record-steps`` (the
programs are bench/probes/step_programs.py, recorded with diagnose_kernel's first-pass sections
and counters); ``catalog.json`` says which step-level causes each must show, and which steps
are held out (recorded once, scored, never used to change a rule). The scores are computed
here and must equal the table in docs/DIAGNOSIS.md.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from nsight_agent.diagnose import metrics as dm
from nsight_agent.diagnose.advice import owner_actions
from nsight_agent.diagnose.findings import findings
from nsight_agent.diagnose.kernel import diagnose_action
from nsight_agent.diagnose.owner import Owner, owner_of, user_kernel_names
from nsight_agent.diagnose.places import clean_op, group_of, kernels_by_time, places
from nsight_agent.diagnose.step import Launch, host_gaps, launch_bound, unfused_chains
from nsight_agent.engine.collection import extract
from nsight_agent.service.diagnose import diagnose_file
from nsight_agent.views.diagnosis import ReportDiagnosis
from nsight_agent.views.text import render_diagnosis
from tests.fakes import FakeAction
from tests.fixture_reports import unpacked
from tests.test_diagnose_causes import BASE, rule

ROOT = Path(__file__).parent.parent
STEPS = Path(__file__).parent / "fixtures" / "steps"
CATALOG = json.loads((STEPS / "catalog.json").read_text()) if STEPS.exists() else []
DOC = ROOT / "docs" / "DIAGNOSIS.md"
PROGRAMS = ROOT / "bench" / "probes" / "step_programs.py"
# Actions that only fit code you own: never offered for a library kernel.
CODE_LEVEL = re.compile(r"__launch_bounds__|maxrregcount|num_warps|Pad each shared|swizzle", re.I)


def report(step_id: str) -> Path:
    """The step's report, decompressed once per test process (``fixture_reports.unpacked``)."""
    return unpacked(STEPS / f"step_{step_id}.ncu-rep.xz")


@functools.cache
def diagnosed(step_id: str) -> ReportDiagnosis:
    entry = next(e for e in CATALOG if e["id"] == step_id)
    wall = entry.get("wall_us")
    return diagnose_file(
        report(step_id),
        limit=10,
        one_line=0,
        user_kernels=user_kernel_names((ROOT / entry.get("source", PROGRAMS)).read_text()),
        wall_ns=None if wall is None else wall * 1e3,
    )


@functools.cache
def launches_of(step_id: str) -> dict[tuple[str, str | None], list[Any]]:
    """The report's actions per (kernel name as diagnosed, operator): one kernel's launches,
    not every kernel that shares its name (ATen's elementwise kernels all do)."""
    actions = extract.iter_actions(extract.load(report(step_id)))
    placed = places(actions, [extract.nvtx_ranges(a) for a in actions])
    return {(name[:80], op): acts for name, op, _ns, acts in kernels_by_time(actions, placed)}


def step_causes(step_id: str) -> set[str]:
    step = diagnosed(step_id).step
    assert step is not None
    return {c.id for c in step.causes or []}


IDS = [e["id"] for e in CATALOG]
TUNING = [e for e in CATALOG if e["split"] == "tuning"]


# --- owners -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "kind", "who"),
    [
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "library", "cuBLAS"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "library", "cuBLAS"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16", "library", "cuDNN"),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "library", "NCCL"),
        ("cutlass_80_tensorop_s16816gemm_bf16_128x128", "library", "CUTLASS"),
        ("vectorized_elementwise_kernel", "framework", "ATen"),
        ("void at::native::reduce_kernel<512, 1>(int)", "framework", "ATen"),
        ("vectorized_layer_norm_kernel", "framework", "ATen"),
        ("pytorch_flash::flash_fwd_kernel", "framework", "ATen (flash attention)"),
        ("gemv2T_kernel_val", "library", "cuBLAS"),
        ("gemvNSP_kernel", "library", "cuBLAS"),
        ("gemmk1_kernel", "library", "cuBLAS"),
        ("splitKreduce_kernel", "library", "cuBLAS"),
        ("gemv_kernel", "user", "yours"),  # KernelBench's matrix-vector candidates
        ("my_gemv", "user", "yours"),
        ("triton_poi_fused_add_gelu_0", "compiler", "torch.compile (Inductor)"),
    ],
)
def test_the_owner_comes_from_the_kernel_name(kernel: str, kind: str, who: str) -> None:
    assert owner_of(kernel) == Owner(kind=kind, who=who)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kernel", "mangled", "who"),
    [
        # A user's Triton or extern "C" kernel whose name looks like ATen's: its linker name
        # is its plain name, so it is not ATen's (they were, and got ATen's moves).
        ("softmax_kernel", "softmax_kernel", "yours"),
        ("control_copy_f4", "control_copy_f4", "yours"),
        ("my_layer_norm", "_Z13my_layer_normPKfPfi", "yours"),  # a C++ kernel of the user's
        # ATen's kernel whose bare name matches no ATen pattern: the namespace says it.
        (
            "conv_depthwise2d_forward_kernel_generic",
            "_ZN2at6native51_GLOBAL__N__a30dace1_18_DepthwiseConv2d_cu_dd31f38d33"
            "conv_depthwise2d_forward_kernel_genericIfEEvN",
            "ATen",
        ),
        (
            "vectorized_elementwise_kernel",
            "_ZN2at6native29vectorized_elementwise_kernelILi4E",
            "ATen",
        ),
        ("vectorized_elementwise_kernel", None, "ATen"),  # no linker name: the bare name decides
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "nvjet_sm90_tst_256x128", "cuBLAS"),
        ("flash_fwd_kernel", "_ZN13pytorch_flash16flash_fwd_kernelI", "ATen (flash attention)"),
        ("flash_fwd_kernel", "_Z16flash_fwd_kernelPKfS0_S0_Pfiii", "yours"),
        ("flash_fwd_kernel", None, "ATen (flash attention)"),
    ],
)
def test_the_linker_name_settles_whether_a_kernel_is_atens(
    kernel: str, mangled: str | None, who: str
) -> None:
    assert owner_of(kernel, mangled=mangled).who == who


def test_owners_from_the_h200_reports_linker_names() -> None:
    """Read off real reports: the planted extern "C" and Triton copies are the user's; the
    step's depthwise convolution (at::native, a bare name no pattern knows) is ATen's."""
    planted = ROOT / "tests" / "fixtures" / "planted"
    for name in ("control_copy_cuda", "control_copy_triton"):
        k = diagnose_file(planted / f"{name}.ncu-rep", limit=1, one_line=0).kernels[0]
        assert k.diagnosis.owner == Owner(kind="user", who="yours"), name
        assert not any("ATen" in (c.note or "") for c in k.diagnosis.causes)
    loaded = extract.load(report("layer_ho"))  # kept: its actions live while it does
    actions = extract.iter_actions(loaded)
    depthwise = [a for a in actions if "depthwise" in dm.kernel_name(a)]
    assert depthwise
    for a in depthwise:
        mangled = dm.mangled_name(a)
        assert mangled is not None and mangled.startswith("_ZN2at6native")
        assert owner_of(dm.kernel_name(a), mangled=mangled) == Owner(kind="framework", who="ATen")
        assert owner_of(dm.kernel_name(a)) == Owner(kind="user", who="yours")  # the name alone


def test_the_users_own_kernels_come_from_the_source() -> None:
    chain = (ROOT / "examples" / "contract" / "step_unfused_chain.py").read_text()
    assert user_kernel_names(chain) == {"col_gather"}
    cuda = (ROOT / "examples" / "contract" / "cuda_vector_add.py").read_text()
    names = user_kernel_names(cuda)
    assert names and all(owner_of(n, names).kind == "user" for n in names)
    # A name the source defines wins over a library-looking one; an unknown name is not "yours".
    assert owner_of("gemm_kernel", {"gemm_kernel"}).kind == "user"
    assert owner_of("mystery", {"col_gather"}) == Owner(kind="unknown", who="not in your source")
    assert user_kernel_names("def broken(:") == set()


def test_torch_operator_ranges_name_the_group() -> None:
    assert clean_op("aten::add, seq = 12, op_id = 7") == "aten::add"
    assert clean_op("autograd::engine::evaluate_function: MmBackward0, seq = 3") == (
        "MmBackward0 (backward)"
    )
    ranges = {
        "nsight_agent.call": ["call=0"],
        "<default domain>": ["attention", "aten::linear, seq = 1, op_id = 2", "aten::mm"],
    }
    assert group_of(ranges, "nvjet_x") == ("attention", "aten::linear")
    # A range around the whole report tells nothing: the operator is the group then.
    assert group_of(ranges, "nvjet_x", frozenset({"attention"})) == ("aten::linear", "aten::linear")
    assert group_of({}, "my_kernel") == ("my_kernel", None)


# --- owner-aware advice -----------------------------------------------------------------------

REG_LIMITED = {
    **BASE,
    "sm__maximum_warps_per_active_cycle_pct": 25.0,
    "launch__occupancy_limit_registers": 1.0,
    "launch__occupancy_limit_warps": 8.0,
    "launch__occupancy_limit_blocks": 32.0,
    "launch__occupancy_limit_shared_mem": 8.0,
    "launch__registers_per_thread": 168.0,
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": 30.0,
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": 30.0,
}


def test_a_library_kernel_is_advised_as_a_library_kernel() -> None:
    """Occupancy limited by registers: a user's kernel caps registers; cuDNN's cannot be
    recompiled, so its advice is another backend, shapes, dtype."""
    mine = diagnose_action(
        FakeAction(REG_LIMITED, name="my_attention"), user_kernels={"my_attention"}
    )
    assert mine.causes[0].id == "occupancy_registers"
    assert CODE_LEVEL.search(" ".join(mine.causes[0].actions))
    name = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3"
    lib = diagnose_action(FakeAction(REG_LIMITED, name=name))
    assert lib.owner == Owner(kind="library", who="cuDNN")
    assert lib.causes[0].id == "occupancy_registers"
    assert not CODE_LEVEL.search(" ".join(a for c in lib.causes for a in c.actions))
    assert "sdpa_kernel" in lib.causes[0].actions[0]
    assert lib.causes[0].note is not None and "cuDNN" in lib.causes[0].note


def test_every_owner_has_moves_it_can_make() -> None:
    for who in ("cuBLAS", "cuDNN", "CUTLASS", "NCCL"):
        acts = owner_actions(Owner(kind="library", who=who), "k")
        assert acts and not CODE_LEVEL.search(" ".join(acts)), who
    assert owner_actions(Owner(kind="user", who="yours"), "k") is None
    assert owner_actions(Owner(kind="unknown", who="unknown"), "k") is None


@pytest.mark.parametrize(
    ("precision", "says"),
    [
        ("tensor_bf16", "it runs tensor_bf16 math already: fp8"),
        ("half", "it runs half math already: fp8"),
        ("tensor_tf32", "it runs tensor_tf32 math: use bf16/fp16"),
        ("fp32", "it runs fp32 math: use bf16/fp16"),
        ("tensor", "if it runs fp32/tf32 (the report does not say which precision"),
        (None, "if it runs fp32/tf32 (the report does not say which precision"),
        ("tensor_fp8", None),
    ],
)
def test_cublas_cheaper_math_is_advised_for_the_precision_the_report_shows(
    precision: str | None, says: str | None
) -> None:
    """ "Use bf16" for a GEMM that runs bf16 said more than the report knew."""
    acts = owner_actions(Owner(kind="library", who="cuBLAS"), "nvjet_sm90", precision)
    assert acts is not None and acts[0].startswith("cuBLAS picks this kernel from the shape")
    moves = [a for a in acts if "fp8" in a]
    assert moves == ([] if says is None else [next(a for a in acts if a.startswith(says))])


def test_a_bf16_gemm_is_not_told_to_use_bf16() -> None:
    """On real H200 reports: the step's cuBLAS GEMM with its tensor precision counted, and the
    bundled one without them (the advice then says what it does not know)."""
    gemm = next(
        k.diagnosis
        for k in diagnosed("chain").kernels
        if k.diagnosis.owner and k.diagnosis.owner.who == "cuBLAS"
    )
    assert gemm.bound.precision == "tensor_bf16"
    acts = " | ".join(gemm.causes[0].actions)
    assert "already: fp8" in acts and "use bf16" not in acts
    bundled = ROOT / "nsight_agent" / "data" / "reports" / "h200_bf16_matmul_sections.ncu-rep"
    unknown = diagnose_file(bundled, limit=1, one_line=0).kernels[0].diagnosis
    assert unknown.bound.precision == "tensor"
    assert any(a.startswith("if it runs fp32/tf32") for a in unknown.causes[0].actions)


# --- never silent -----------------------------------------------------------------------------


def test_a_kernel_with_no_cause_of_ours_takes_ncus_estimate() -> None:
    quiet = {**BASE, "sm__throughput.avg.pct_of_peak_sustained_elapsed": 65.0}
    assert diagnose_action(FakeAction(quiet)).headline.endswith(
        "no cause found in the metrics collected"
    )
    uncoalesced = [rule("UncoalescedGlobalAccess", "Uncoalesced Global Accesses", 45.0)]
    d = diagnose_action(FakeAction(quiet, uncoalesced))
    assert d.causes[0].id == "uncoalesced_global_access"
    assert (d.causes[0].gain, d.causes[0].gain_src) == (45.0, "ncu:UncoalescedGlobalAccess")
    assert "no cause found" not in d.headline
    # A rule with no cause of ours is passed through as ncu's; a local estimate is not a gain.
    odd = [rule("NewRule2027", "Something New", 30.0, kind=1)]
    d = diagnose_action(FakeAction(quiet, odd))
    assert d.causes[0].id == "ncu_rule" and d.causes[0].title == "ncu: Something New"
    assert d.causes[0].gain is None and d.causes[0].note is not None
    assert "local estimate 30%" in d.causes[0].note
    # Under the pass-through cut (20 %) the kernel stays honestly without a cause.
    small = [rule("UncoalescedGlobalAccess", "Uncoalesced Global Accesses", 19.0)]
    assert "no cause found" in diagnose_action(FakeAction(quiet, small)).headline


def test_non_fused_fp_instructions_are_not_a_precision_cause() -> None:
    """ncu's FPInstructions rule counts FADD/FMUL pairs that could be one FFMA. Mapped to
    slow_precision, it called ATen's fp32 `mul` and `gelu` kernels (memory-bound, no fp64)
    "a slower precision than needed" on the H200 (the chain step's deeper pass)."""
    fp32 = "FP32 Non-Fused Instructions"
    memory = {**BASE, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": 73.0}
    for kind in (1, 2):  # local, global
        d = diagnose_action(FakeAction(memory, [rule("FPInstructions", fp32, 50.0, kind=kind)]))
        assert all(c.id not in ("slow_precision", "tensor_cores_idle") for c in d.causes), d
        assert "precision" not in d.headline
    # A local estimate on a memory-bound kernel is listed, not made its cause.
    d = diagnose_action(FakeAction(memory, [rule("FPInstructions", fp32, 50.0, kind=1)]))
    assert d.bound.bound == "memory-bound" and not d.causes
    assert d.unmapped and d.unmapped[0].startswith("FPInstructions")
    # Where it is passed through, it is ncu's rule under its own title.
    quiet = {**BASE, "sm__throughput.avg.pct_of_peak_sustained_elapsed": 65.0}
    d = diagnose_action(FakeAction(quiet, [rule("FPInstructions", fp32, 50.0)]))
    assert (d.causes[0].id, d.causes[0].title) == ("ncu_rule", f"ncu: {fp32}")


@pytest.mark.parametrize("step_id", IDS)
def test_only_kernels_that_run_fp64_math_are_told_of_fp64(step_id: str) -> None:
    """slow_precision names fp64 math: a kernel that executed no DADD/DMUL/DFMA (the report's
    own instruction counters) never gets it, whatever ncu's rules said."""
    ops = ("dadd", "dmul", "dfma")
    names = [f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in ops]
    checked = 0
    for k in diagnosed(step_id).kernels:
        dg = k.diagnosis
        acts = launches_of(step_id)[(dg.kernel, k.op)]
        counted = [a.metric_by_name(n) for a in acts for n in names]
        fp64 = sum(m.as_double() for m in counted if m is not None)
        if fp64 == 0.0:
            checked += 1
            assert "slow_precision" not in [c.id for c in dg.causes], (k.op, dg.headline)
            assert "precision than" not in dg.headline, (k.op, dg.headline)
    assert checked  # every step here runs fp32/bf16 kernels only


@pytest.mark.parametrize("step_id", IDS)
def test_no_sizeable_kernel_is_silent_beside_an_ncu_estimate(step_id: str) -> None:
    """No kernel with >= 5 % of the step says "no cause found" while ncu estimates >= 20 % of
    its run time (a global estimate; a local one only counts when the kernel is not
    memory-bound: a faster SM unit does not shorten a kernel that waits on memory)."""
    d = diagnosed(step_id)
    checked = 0
    for k in d.kernels:
        if (k.share_pct or 0.0) < 5.0:
            continue
        memory_bound = k.diagnosis.bound.bound == "memory-bound"
        best = max(
            (
                f.estimated_speedup_pct or 0.0
                for a in launches_of(step_id)[(k.diagnosis.kernel, k.op)]
                for f in findings(a)
                if not (memory_bound and f.speedup_type == "local")
            ),
            default=0.0,
        )
        if best >= 20.0:
            checked += 1
            assert "no cause found" not in k.diagnosis.headline, (k.op, k.diagnosis.headline)
    assert d.kernels


# --- on the recorded steps --------------------------------------------------------------------


@pytest.mark.parametrize("step_id", IDS)
def test_the_step_comes_first_and_fits(step_id: str) -> None:
    d = diagnosed(step_id)
    step = d.step
    assert step is not None and step.groups
    assert len(step.model_dump_json(exclude_none=True)) <= 4096
    assert 99.0 <= sum(g.share_pct for g in step.groups) + (step.rest_pct or 0.0) <= 101.0
    assert all(g.gain_pct is None or 0.0 <= g.gain_pct <= g.share_pct + 0.05 for g in step.groups)
    assert [g.share_pct for g in step.groups] == sorted(
        (g.share_pct for g in step.groups), reverse=True
    )


@pytest.mark.parametrize("step_id", IDS)
def test_library_kernels_are_advised_as_library_kernels(step_id: str) -> None:
    for k in diagnosed(step_id).kernels:
        owner = k.diagnosis.owner
        assert owner is not None
        if owner.kind == "library":
            text = " ".join(a for c in k.diagnosis.causes for a in c.actions)
            assert not CODE_LEVEL.search(text), (k.diagnosis.kernel, text)


def test_the_bf16_gemm_is_labelled_with_its_tensor_precision() -> None:
    gemms = [
        k
        for k in diagnosed("chain").kernels
        if (k.diagnosis.owner and k.diagnosis.owner.who) == "cuBLAS"
    ]
    assert gemms
    for k in gemms:
        assert k.diagnosis.bound.precision == "tensor_bf16", k.diagnosis.bound
        assert "fp32" not in k.diagnosis.headline


def test_the_users_kernel_is_the_users() -> None:
    """Its cause needs the deeper pass (SourceCounters); these are first-pass reports. On the
    H200 through MCP the deeper pass named it."""
    mine = [k for k in diagnosed("chain").kernels if k.diagnosis.kernel == "user_col_gather"]
    assert mine and mine[0].diagnosis.owner == Owner(kind="user", who="yours")
    assert mine[0].diagnosis.deeper and "SourceCounters" in mine[0].diagnosis.deeper
    step = diagnosed("chain").step
    assert step is not None
    assert any(g.group == "user_col_gather" and g.owner == "yours" for g in step.groups)


def test_the_held_out_layer_step_is_never_silent() -> None:
    """Issue 38's held-out step, read as a report alone: the expectations written before it
    was recorded (bench/probes/step_programs.py) hold, and the text starts with the step."""
    d = diagnosed("layer_ho")
    assert "unfused_chain" in step_causes("layer_ho")
    sizeable = [k for k in d.kernels if (k.share_pct or 0.0) >= 5.0]
    assert len(sizeable) >= 5
    for k in sizeable:
        assert "no cause found" not in k.diagnosis.headline, (k.diagnosis.kernel, k.op)
    mine = [k for k in d.kernels if k.diagnosis.kernel == "user_col_scale"]
    assert mine and mine[0].diagnosis.owner == Owner(kind="user", who="yours")
    lines = render_diagnosis(d).splitlines()
    assert lines[0].startswith("14 kernel(s) on NVIDIA H200") and lines[1].startswith("step: ")


@pytest.mark.parametrize("entry", TUNING, ids=[e["id"] for e in TUNING])
def test_a_tuning_step_shows_its_causes(entry: dict[str, Any]) -> None:
    assert set(entry["expect"]) <= step_causes(entry["id"]), step_causes(entry["id"])


def score_table() -> str:
    rows = ["| split | steps | step causes right |", "| --- | --- | --- |"]
    for split, label in (("tuning", "tuning"), ("held_out", "held-out")):
        entries = [e for e in CATALOG if e["split"] == split]
        right = sum(set(e["expect"]) <= step_causes(e["id"]) for e in entries)
        pct = f"{100 * right // max(1, len(entries))} %"
        rows.append(f"| {label} | {len(entries)} | {right} ({pct}) |")
    return "\n".join(rows)


def test_the_documented_step_scores_are_the_computed_ones() -> None:
    found = re.search(r"<!-- step-scores -->\n(.*?)\n<!-- /step-scores -->", DOC.read_text(), re.S)
    assert found is not None, "docs/DIAGNOSIS.md lost its step-scores markers"
    assert found.group(1) == score_table(), "update docs/DIAGNOSIS.md:\n" + score_table()


# --- step-level causes on hand-built launches -------------------------------------------------


def pointwise(group: str, us: float = 50.0, mb: float = 128.0, owner: str = "framework") -> Launch:
    return Launch("vectorized_elementwise_kernel", group, owner, us * 1e3, mb * 1e6, "memory-bound")


def test_an_unfused_chain_is_found_and_its_saving_bounded() -> None:
    chain = [pointwise(op) for op in ("aten::mul", "aten::add", "aten::gelu", "aten::mul")]
    gemm = Launch("nvjet_x", "aten::mm", "library", 100e3, 50e6, "compute-bound")
    c = unfused_chains([*chain, gemm], total_ns=300e3)
    assert c is not None and c.id == "unfused_chain"
    # 4 passes of 128 MB, fused about one: 200 us x (1 - 1/4) = 150 us of a 300 us step
    assert c.gain_pct == 50.0
    assert c.groups == ["aten::mul", "aten::add", "aten::gelu"]
    # A GEMM in the middle breaks the chain; two kernels are not a chain.
    assert unfused_chains([chain[0], chain[1], gemm, chain[2], chain[3]], total_ns=300e3) is None
    # Passes over tensors of very different sizes are not the same tensors.
    assert unfused_chains([pointwise("a"), pointwise("b", mb=1.0), pointwise("c")], 150e3) is None
    # The user's own kernels are theirs to fuse by hand; the rule is about framework ops.
    assert unfused_chains([pointwise(o, owner="user") for o in "abc"], 150e3) is None
    # Broadcast index arithmetic makes ATen's elementwise_kernel compute-bound by SOL: still
    # a pass over memory (low FLOP per byte), still fusable. A GEMM-like intensity is not.
    busy = [
        Launch("elementwise_kernel", o, "framework", 50e3, 128e6, "compute-bound", 0.3)
        for o in "abc"
    ]
    assert unfused_chains(busy, 150e3) is not None
    dense = [Launch("k", o, "framework", 50e3, 128e6, "compute-bound", 40.0) for o in "abc"]
    assert unfused_chains(dense, 150e3) is None
    # Tiny launches are the launch rule's: 3 us kernels do not make a fusion finding.
    assert unfused_chains([pointwise(o, us=3.0) for o in "abc"], 9e3) is None


def test_a_launch_bound_step() -> None:
    tiny = [
        Launch("k", f"aten::add_{i}", "framework", 2e3, 1e4, "latency-bound") for i in range(30)
    ]
    c = launch_bound(tiny, total_ns=60e3)
    assert c is not None and c.id == "launch_bound_step"
    # 30 launches x 3 us of CPU each >= 90 us against 60 us of kernels: <= 33 % saved
    assert c.gain_pct == pytest.approx(33.3, abs=0.05)
    assert launch_bound(tiny[:19], total_ns=38e3) is None
    big = [Launch("k", "g", "framework", 200e3, 1e8, "memory-bound")] * 31
    assert launch_bound([*tiny, *big], total_ns=6.26e6) is None  # tiny launches are a minority


def test_host_gaps_need_the_wall_time() -> None:
    assert host_gaps(400e3, None) is None
    assert host_gaps(400e3, 450e3) is None  # 11 % idle: under the 20 % cut
    c = host_gaps(400e3, 1000e3)
    assert c is not None and c.gain_pct == 60.0
