"""Hot lines in the user's code: a library's inlined code counts on the line that called it.

The planted Triton reports (tests/fixtures/planted, H200, SourceCounters with imported source)
hold kernels whose hottest line, as ncu's source correlation names it, is inside Triton's
``triton/language/standard.py``: ``tl.sigmoid`` in ``control_silu_triton`` (75 % of its stall
samples), ``tl.sum`` in ``fp16_nodot_triton`` (73 %). The user's line that made the call must
come first, the library line kept as its detail. Stand-in actions cover what no report holds:
a C++ header's inlined code, two call sites of one function, a kernel of library code alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import ncu_report
import pytest

from nsight_agent.diagnose.call_sites import call_named, callers_of, is_library
from nsight_agent.diagnose.source_lines import hot_lines
from tests.report_stand_ins import StandInMetric

ROOT = Path(__file__).resolve().parents[1]
PLANTED = ROOT / "tests" / "fixtures" / "planted"
BENCH = ROOT / "bench" / "planted" / "planted_triton.py"
SOFTMAX = ROOT / "tests" / "fixtures" / "sources" / "triton_softmax.py"


def action(kernel_id: str) -> Any:
    path = PLANTED / f"{kernel_id}.ncu-rep"
    if not path.exists() or not BENCH.exists():
        pytest.skip(f"{kernel_id}: not recorded")
    return ncu_report.load_report(str(path)).range_by_idx(0).action_by_idx(0)


def line_of(kernel: str, code: str) -> int:
    """The first line of bench/planted/planted_triton.py after ``kernel``'s name with ``code``."""
    lines = BENCH.read_text().splitlines()
    start = next(i for i, text in enumerate(lines) if f"def {kernel}(" in text)
    return next(i + 1 for i in range(start, len(lines)) if code in lines[i])


def library_share(kernel: Any) -> float:
    """% of the kernel's stall samples whose line ncu names in a library file."""
    metric = kernel.metric_by_name("smsp__pcsamp_sample_count")
    ids = metric.correlation_ids()
    total = lib = 0.0
    for i in range(metric.num_instances()):
        value = metric.as_double(i)
        total += value
        info = kernel.source_info(ids.as_uint64(i))
        if info is not None and is_library(str(info.file_name())):
            lib += value
    return 100.0 * lib / total


# (report, kernel, code on the calling line, the call as written)
CALLED = [
    ("control_silu_triton", "ho_tl_silu", "x * tl.sigmoid(x)", "tl.sigmoid"),
    ("fp16_nodot_triton", "planted_tl_gemm_nodot", "acc += tl.sum(", "tl.sum"),
]


@pytest.mark.parametrize(("report", "kernel", "code", "call"), CALLED, ids=[c[0] for c in CALLED])
def test_the_top_line_is_the_users_call_not_the_librarys(
    report: str, kernel: str, code: str, call: str
) -> None:
    k = action(report)
    assert library_share(k) > 50.0  # ncu's correlation alone names standard.py first
    spots = hot_lines(k, None)
    assert spots is not None and spots.level == "source"
    assert spots.file == "planted_triton.py"
    top = spots.lines[0]
    assert top.line == line_of(kernel, code) and top.file is None
    assert top.text is not None and code in top.text
    assert top.inlined is not None and re.fullmatch(rf"{call} in standard\.py:\d+", top.inlined)
    assert top.share_pct > library_share(k)  # the library's samples and the line's own
    assert all(h.file is None for h in spots.lines)


def test_the_text_answer_names_the_library_line_under_the_users() -> None:
    from nsight_agent.service.diagnose import diagnose_file
    from nsight_agent.views.text import render_diagnosis

    action("control_silu_triton")  # skips where the report is not recorded
    text = render_diagnosis(diagnose_file(PLANTED / "control_silu_triton.ncu-rep"))
    lines = text.splitlines()
    call = line_of("ho_tl_silu", "x * tl.sigmoid(x)")
    at = next(i for i, t in enumerate(lines) if t.strip().startswith(f"planted_triton.py:{call} "))
    assert re.fullmatch(r"\s+inlined: tl\.sigmoid in standard\.py:\d+", lines[at + 1])


def test_two_calls_of_one_library_function_keep_their_own_samples() -> None:
    # Layer norm: tl.sum for the mean, then tl.sum for the variance inside an expression
    # whose own instructions the compiler folded away: each reduction lands on its own call.
    k = action("layernorm_wide_triton")
    spots = hot_lines(k, None, top=40)
    assert spots is not None
    inlined = {h.line: h.inlined for h in spots.lines if h.inlined}
    mean = line_of("ho_tl_layernorm_wide", "mean = tl.sum(acc")
    var = line_of("ho_tl_layernorm_wide", "tl.sqrt(tl.sum(acc")
    assert set(inlined) == {mean, var}, inlined
    assert all(v.startswith("tl.sum in standard.py:") for v in inlined.values())


def test_the_softmaxs_reductions_count_on_the_lines_that_call_them() -> None:
    """The tutorial softmax (held out, recorded once): ncu names Triton's reductions
    (standard.py) for much of its samples; its hot lines are its own, the reductions' code on
    the lines calling tl.max and tl.sum."""
    k = action("softmax_triton")
    spots = hot_lines(k, None, top=8)
    assert spots is not None and spots.file == "planted_triton.py"
    inlined = {h.line: h.inlined for h in spots.lines if h.inlined}
    calls = {
        line_of("hom_tl_softmax", "tl.max(x, axis=0)"): "tl.max",
        line_of("hom_tl_softmax", "tl.sum(numerator, axis=0)"): "tl.sum",
    }
    assert inlined and set(inlined) <= set(calls), inlined
    assert all(v.startswith(f"{calls[line]} in standard.py:") for line, v in inlined.items())


def _recorded_triton() -> list[str]:
    catalog = json.loads((PLANTED / "catalog.json").read_text()) if PLANTED.exists() else []
    return [
        e["id"]
        for e in catalog
        if e["language"] == "triton" and (PLANTED / f"{e['id']}.ncu-rep").exists()
    ]


@pytest.mark.parametrize("report", _recorded_triton())
def test_no_hot_line_of_a_triton_kernel_is_in_a_library(report: str) -> None:
    """Every Triton kernel of the user's has lines of its own: none of its hot lines, under
    any basis, is Triton's."""
    spots = hot_lines(action(report), None, top=5)
    assert spots is not None and spots.level == "source"
    assert spots.file is not None and spots.file.endswith(".py")
    assert spots.file != "standard.py" and all(h.file != "standard.py" for h in spots.lines)


# ---------------------------------------------------------------------------------------------
# Stand-ins: a C++ header, a kernel of library code alone


class _Info:
    def __init__(self, name: str, line: int) -> None:
        self.name, self.at = name, line

    def file_name(self) -> str:
        return self.name

    def line(self) -> int:
        return self.at


USER = "/home/me/kernels/reduce.cu"
CUB = "/usr/local/cuda/include/cub/block/block_reduce.cuh"


class _Kernel:
    """pc -> (file, line, stall samples); the user's file's text."""

    def __init__(self, code: dict[int, tuple[str, int, float]], files: dict[str, str]) -> None:
        self.code, self.files = code, files
        pcs = sorted(code)
        self.metrics = {
            "smsp__pcsamp_sample_count": StandInMetric([code[p][2] for p in pcs], pcs),
            "inst_executed": StandInMetric([1.0] * len(pcs), pcs),
        }

    def metric_by_name(self, name: str) -> StandInMetric | None:
        return self.metrics.get(name)

    def source_info(self, address: int) -> _Info:
        name, line, _ = self.code[address]
        return _Info(name, line)

    def sass_by_pc(self, address: int) -> str:
        return "FADD R0, R1, R2"

    def source_files(self) -> dict[str, str]:
        return self.files


def test_a_headers_inlined_code_counts_on_the_nearest_user_line_in_the_sass() -> None:
    text = "\n".join(f"// line {i}" for i in range(1, 40))
    k = _Kernel(
        {
            0x00: (USER, 10, 2.0),
            0x10: (USER, 12, 1.0),
            0x20: (CUB, 200, 50.0),
            0x30: (CUB, 201, 30.0),
            0x40: (USER, 14, 5.0),
            0x50: (USER, 20, 12.0),
        },
        {USER: text},
    )
    spots = hot_lines(k, None)
    assert spots is not None and spots.file == "reduce.cu"
    assert [(h.line, h.share_pct) for h in spots.lines] == [(12, 51.0), (14, 35.0), (20, 12.0)]
    assert spots.lines[0].inlined == "block_reduce.cuh:200 (nearest in the SASS)"
    assert spots.lines[1].inlined == "block_reduce.cuh:201 (nearest in the SASS)"


def test_a_kernel_of_library_code_alone_keeps_the_librarys_lines() -> None:
    k = _Kernel({0x00: (CUB, 200, 3.0), 0x10: (CUB, 201, 1.0)}, {})
    spots = hot_lines(k, None)
    assert spots is not None and spots.file == "block_reduce.cuh"
    assert [(h.line, h.inlined) for h in spots.lines] == [(200, None), (201, None)]


def test_a_python_librarys_function_is_followed_to_the_name_the_user_called() -> None:
    lib = "/venv/lib/python3.12/site-packages/triton/language/standard.py"
    library = (
        "@jit\n"  # 1
        "def _elementwise_max(a, b):\n"  # 2
        "    return core.maximum(a, b)\n"  # 3
        "\n"
        "@jit\n"  # 5
        "def max(input, axis=None):\n"  # 6
        "    return core.reduce(input, axis, _elementwise_max)\n"  # 7
    )
    user = "/work/softmax.py"
    source = "def k(x):\n    y = tl.load(x)\n    m = y - tl.max(y, axis=0)\n    tl.store(x, m)\n"
    assert callers_of(library, 3) == ["_elementwise_max", "max"]
    assert callers_of(library, 4) == []  # a blank line between functions
    assert callers_of("def (", 1) == []
    assert call_named("    m = y - tl.max(y, axis=0)", ["_elementwise_max", "max"]) == "tl.max"
    assert call_named("    m = tl.maximum(y, 0)", ["max"]) is None
    k = _Kernel(
        {
            0x00: (user, 2, 10.0),
            0x10: (lib, 3, 60.0),
            0x20: (user, 4, 10.0),  # the next statement is nearer in the SASS than the call
            0x30: (user, 3, 20.0),
        },
        {lib: library, user: source},
    )
    spots = hot_lines(k, None)
    assert spots is not None and spots.file == "softmax.py"
    assert (spots.lines[0].line, spots.lines[0].share_pct) == (3, 80.0)
    assert spots.lines[0].inlined == "tl.max in standard.py:3"
    assert spots.lines[0].text == "m = y - tl.max(y, axis=0)"


def test_library_paths() -> None:
    assert is_library("/opt/venv/lib/python3.12/site-packages/triton/language/standard.py")
    assert is_library("/src/triton/python/triton/language/standard.py")
    assert is_library("/usr/local/cuda-12.8/include/cuda_fp16.hpp")
    assert is_library("/opt/cutlass/include/cute/arch/mma_sm90.hpp")
    assert is_library("C:\\venv\\Lib\\site-packages\\torch\\include\\ATen\\core\\Tensor.h")
    assert not is_library("/work/main/bench/planted/planted_triton.py")
    assert not is_library("/tmp/run/user_source.py")
    assert not is_library("planted.cu")


@pytest.mark.gpu
def test_on_a_gpu_a_triton_softmaxs_top_line_is_the_users(tmp_path: Path) -> None:
    """A softmax diagnosed from source: its hot lines are the source's own (the reductions'
    library code counted on the lines that call tl.max and tl.sum), none Triton's."""
    from nsight_agent.service.diagnose import diagnose_source
    from nsight_agent.service.measure import Measuring

    source = SOFTMAX.read_text()
    fields = {"source": source, "language": "triton", "configs": [{"rows": 8192, "cols": 4096}]}
    d = diagnose_source(fields, Measuring(runs_root=tmp_path))
    (k,) = [k for k in d.kernels if k.diagnosis.kernel == "softmax_kernel"]
    where = k.diagnosis.where
    assert where is not None and where.level == "source", where
    assert where.file != "standard.py" and all(h.file is None for h in where.lines), where
    own = {line.strip() for line in source.splitlines()}
    assert all(h.text in own for h in where.lines), where
    assert any(h.inlined for h in where.lines), where
