"""The harness package: output checks, compiler-error parsing, rendering, and the rendered
harness executed for real on CPU (Triton in its interpreter, torch on CPU tensors)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from nsight_agent.engine.collection import extract as extraction
from nsight_agent.engine.harness import checks, cuda_build, render
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.harness.spec import read_spec
from nsight_agent.engine.process import child_env
from nsight_agent.errors import HarnessError, NsightAgentError
from nsight_agent.request import ProfileRequest, Variant

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "contract"


# --- checks -----------------------------------------------------------------------------------


def test_equal_outputs_pass_with_zero_error() -> None:
    x = torch.arange(6.0).reshape(2, 3)
    outcome = checks.compare((x.clone(), {"b": x * 2}), (x, {"b": x * 2}), None, None)
    assert (outcome.ok, outcome.reason, outcome.max_abs_err, outcome.max_rel_err) == (
        True,
        "ok",
        0.0,
        0.0,
    )


def test_mismatch_reports_max_absolute_and_relative_error() -> None:
    ref = torch.tensor([1.0, 2.0, 4.0])
    got = torch.tensor([1.0, 2.5, 4.0])
    outcome = checks.compare(got, ref, None, None)
    assert not outcome.ok and outcome.reason == "mismatch"
    assert outcome.max_abs_err == pytest.approx(0.5)
    assert outcome.max_rel_err == pytest.approx(0.25)
    assert "1 of 3 elements" in outcome.message


def test_tolerances_are_dtype_aware_and_overridable() -> None:
    ref = torch.ones(4, dtype=torch.float16)
    got = ref + 5e-3  # within float16's default rtol 1e-2
    assert checks.compare(got, ref, None, None).ok
    assert not checks.compare(got, ref, 1e-4, 0.0).ok
    ref32, got32 = ref.float(), got.float()  # the same error is too large for float32
    assert not checks.compare(got32, ref32, None, None).ok
    assert checks.default_tolerances(torch.int32) == (0.0, 0.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_always_fail_even_with_huge_tolerances(bad: float) -> None:
    ref = torch.tensor([1.0, bad])
    got = torch.tensor([1.0, bad])
    outcome = checks.compare(got, ref, 1e9, 1e9)
    assert not outcome.ok and outcome.reason == "nonfinite"
    assert not checks.check_single(got).ok


@pytest.mark.parametrize(
    ("got", "reason", "text"),
    [
        (torch.zeros(3, 2), "shape", "shape (3, 2), baseline (2, 3)"),
        (torch.zeros(2, 3, dtype=torch.float64), "dtype", "torch.float64"),
        ((torch.zeros(2, 3), torch.zeros(1)), "structure", "baseline returns"),
        ([1, 2], "structure", "must return a tensor"),
    ],
)
def test_structure_shape_and_dtype_must_match(got: Any, reason: str, text: str) -> None:
    outcome = checks.compare(got, torch.zeros(2, 3), 1.0, 1.0)
    assert (outcome.ok, outcome.reason) == (False, reason)
    assert text in outcome.message
    assert reason in checks.STRUCTURAL


def test_integer_outputs_compare_exactly() -> None:
    ref = torch.tensor([1, 2, 3])
    assert checks.compare(ref.clone(), ref, None, None).ok
    assert not checks.compare(ref + 1, ref, None, None).ok


def test_views_of_one_buffer_share_a_storage() -> None:
    x = torch.zeros(10)
    assert checks.storages([x[:5]]) == checks.storages([x[5:]])
    assert checks.storages([x]).isdisjoint(checks.storages([torch.zeros(10)]))


# --- CUDA compiler messages -------------------------------------------------------------------

NVCC_LOG = """\
/cache/abc/check.cu(7): error: identifier "yy" is undefined
      out[i] = x[i] + yy[i];
                      ^
/cache/abc/check.cu(9): error: expected a ";"
2 errors detected in the compilation of "/cache/abc/check.cu".
"""


def test_nvcc_errors_map_to_user_source_lines() -> None:
    line, message = cuda_build.parse_errors(NVCC_LOG, "check.cu", user_lines=20)
    assert line == 7 - cuda_build.HEADER_LINES
    assert message.splitlines() == [
        'line 4: error: identifier "yy" is undefined',
        'line 6: error: expected a ";"',
    ]


def test_gcc_style_errors_and_errors_in_generated_bindings() -> None:
    log = "/b/cuda.cu:30:3: error: 'vector_ad' was not declared in this scope\n"
    line, message = cuda_build.parse_errors(log, "cuda.cu", user_lines=10)
    assert line is None
    assert "generated bindings" in message and "vector_ad" in message


def test_source_key_depends_on_source_functions_and_flags() -> None:
    base = cuda_build.source_key("src", ["f"], ["-O3"])
    assert base == cuda_build.source_key("src", ["f"], ["-O3"])
    others = {
        cuda_build.source_key("src ", ["f"], ["-O3"]),
        cuda_build.source_key("src", ["g"], ["-O3"]),
        cuda_build.source_key("src", ["f"], ["-O2"]),
    }
    assert base not in others and len(others) == 3


# --- rendering --------------------------------------------------------------------------------


def request_for(example: str, language: str, **kwargs: Any) -> ProfileRequest:
    fields: dict[str, Any] = {
        "source": (EXAMPLES / example).read_text(),
        "language": language,
        "configs": {"n": [1000]},
        "runs": 2,
        "warmup": 1,
    }
    fields.update(kwargs)
    return ProfileRequest.model_validate(fields)


@pytest.mark.parametrize(
    ("example", "language"),
    [
        ("triton_vector_add.py", "triton"),
        ("torch_softmax.py", "torch"),
        ("torch_compile_gelu.py", "torch_compile"),
        ("cuda_vector_add.py", "cuda"),
    ],
)
def test_each_language_renders_its_spec_and_a_call_into_the_program(
    tmp_path: Path, example: str, language: str
) -> None:
    """One template for every language: SPEC (read back as it was written, nothing of the
    harness run) and a call into the measuring program, whose adapter is the language's."""
    req = request_for(example, language, configs=[{"n": 1, "rows": 2, "cols": 3}])
    harness = render.write_run_files(req, tmp_path, tmp_path / "cache")
    text = harness.read_text()
    compile(text, str(harness), "exec")
    assert "program.main(SPEC, sys.argv[1:])" in text
    assert read_spec(harness) == render.spec_for(req, tmp_path / "cache")[0]
    assert read_spec(harness)["language"] == language
    assert (tmp_path / "user_source.py").read_text() == req.source


def test_a_variant_with_its_own_source_gets_its_own_module(tmp_path: Path) -> None:
    req = request_for(
        "torch_softmax.py",
        "torch",
        configs=[{"rows": 2, "cols": 3}],
        variants=[
            Variant(name="ref"),
            Variant(name="mine", entry="go", source="def go(x):\n    return x\n"),
        ],
    )
    spec, files = render.spec_for(req, tmp_path)
    assert sorted(files) == ["user_source.py", "variant_1.py"]
    assert [v["module"] for v in spec["variants"]] == ["user_source", "variant_1"]
    assert spec["setup_module"] == "user_source"  # one setup: identical inputs for all


def test_missing_templates_fail_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(render, "template_dirs", lambda: [tmp_path])
    with pytest.raises(NsightAgentError, match="harness templates are missing"):
        render.environment()


# --- the rendered harness, executed -----------------------------------------------------------


def run_harness(tmp_path: Path, req: ProfileRequest) -> tuple[int, dict[str, Any]]:
    """Render and run the harness in pre-flight mode on CPU; return (exit code, its JSON)."""
    render.write_run_files(req, tmp_path, tmp_path / "cache")
    proc = subprocess.run(
        [sys.executable, "harness.py", "--preflight", "--device", "cpu"],
        cwd=tmp_path,
        env=child_env({"TRITON_INTERPRET": "1"}),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = tmp_path / ("manifest.json" if proc.returncode == 0 else "error.json")
    assert out.exists(), proc.stdout + proc.stderr
    return proc.returncode, json.loads(out.read_text())


def test_triton_harness_runs_in_the_interpreter_and_writes_a_manifest(tmp_path: Path) -> None:
    req = request_for(
        "triton_vector_add.py",
        "triton",
        configs={"n": [1000, 3000]},
        variants=[Variant(name="torch", entry="reference"), Variant(name="triton", entry="run")],
    )
    rc, manifest = run_harness(tmp_path, req)
    assert rc == 0
    assert manifest["variants"] == ["torch", "triton"]
    assert manifest["configs"] == [{"n": 1000}, {"n": 3000}]
    assert [(c["call"], c["config"], c["run"], c["annotations"]) for c in manifest["calls"]] == [
        # variants interleaved run by run, the order reversed every other run
        (0, 0, 0, ["torch"]),
        (1, 0, 0, ["triton"]),
        (2, 0, 1, ["triton"]),
        (3, 0, 1, ["torch"]),
        (4, 1, 0, ["torch"]),
        (5, 1, 0, ["triton"]),
        (6, 1, 1, ["triton"]),
        (7, 1, 1, ["torch"]),
    ]
    assert [(c["variant"], c["config_index"], c["ok"]) for c in manifest["checks"]] == [
        ("torch", 0, True),
        ("triton", 0, True),
        ("torch", 1, True),
        ("triton", 1, True),
    ]
    assert (tmp_path / "progress.txt").read_text().splitlines()[-1].startswith("8/8 ")


def test_manifest_calls_feed_group_kernels_unchanged(tmp_path: Path) -> None:
    req = request_for(
        "torch_softmax.py",
        "torch",
        configs=[{"rows": 4, "cols": 8}],
        variants=[Variant(name="a", entry="run"), Variant(name="b", entry="manual_softmax")],
    )
    rc, manifest = run_harness(tmp_path, req)
    assert rc == 0
    calls = extraction.calls_from_manifest(manifest)
    # One synthetic profiled kernel per call, as ncu would report under these NVTX ranges.
    records = [
        extraction.ActionRecord(
            index=c.call,
            kernel=f"k_{c.annotations[0]}",
            annotation=c.annotations[0],
            call=c.call,
            values={"gpu__time_duration.sum": 1.0 + c.call},
            units={"gpu__time_duration.sum": "ns"},
            gpu="cpu",
            compute_clock=0.0,
            memory_clock=0.0,
        )
        for c in calls
    ]
    grouped = extraction.group_kernels(records, calls)
    assert {name: [c.run for c, _ in rows] for name, rows in grouped.items()} == {
        "a": [0, 1],
        "b": [0, 1],
    }


def test_each_variant_gets_fresh_identical_inputs(tmp_path: Path) -> None:
    """An entry that scribbles on its inputs cannot change another variant's inputs."""
    source = (
        "import torch\n"
        "def setup(n, device):\n"
        "    return (torch.randn(n, device=device),)\n"
        "def clobber(x):\n"
        "    y = x * 2\n"
        "    x.fill_(1e6)\n"
        "    return y\n"
        "def clean(x):\n"
        "    return x * 2\n"
    )
    req = ProfileRequest(
        source=source,
        language="torch",
        configs={"n": [64]},
        variants=[Variant(name="clobber", entry="clobber"), Variant(name="clean", entry="clean")],
        runs=1,
        warmup=0,
    )
    rc, manifest = run_harness(tmp_path, req)
    assert rc == 0
    assert [c["ok"] for c in manifest["checks"]] == [True, True]


def test_returning_another_variants_tensor_is_flagged_as_aliasing(tmp_path: Path) -> None:
    source = (
        "import torch\n"
        "CACHE = []\n"
        "def setup(n, device):\n"
        "    return (torch.randn(n, device=device),)\n"
        "def honest(x):\n"
        "    CACHE.append(x * 2)\n"
        "    return CACHE[-1]\n"
        "def cheat(x):\n"
        "    return CACHE[0]\n"
    )
    req = ProfileRequest(
        source=source,
        language="torch",
        configs={"n": [64]},
        variants=[Variant(name="honest", entry="honest"), Variant(name="cheat", entry="cheat")],
        runs=1,
        warmup=0,
    )
    rc, manifest = run_harness(tmp_path, req)
    assert rc == 0
    cheat = manifest["checks"][1]
    assert (cheat["variant"], cheat["ok"], cheat["reason"]) == ("cheat", False, "alias")


@pytest.mark.parametrize(
    ("source", "stage", "line", "text"),
    [
        ("import torch\n\ndef setup(n, device)\n    return ()\n", "import", 3, "SyntaxError"),
        ("import torch\nraise RuntimeError('boom at import')\n", "import", 2, "boom at import"),
        ("def setup(n, device):\n    return (n,)\n", "import", None, "no function 'run'"),
        (
            "def setup(n, device):\n    x = [0]\n    return x[n]\n\ndef run(x):\n    return x\n",
            "setup",
            3,
            "IndexError",
        ),
        (
            "import torch\ndef setup(n, device):\n    return (torch.ones(n),)\n\n"
            "def run(x):\n    y = x + 1\n    return y @ torch.ones(n + 1)\n",
            "entry",
            7,
            "NameError",
        ),
    ],
)
def test_broken_sources_write_a_structured_error_and_exit_non_zero(
    tmp_path: Path, source: str, stage: str, line: int | None, text: str
) -> None:
    req = ProfileRequest(source=source, language="torch", configs={"n": [4]})
    rc, error = run_harness(tmp_path, req)
    assert rc == 3
    assert (error["stage"], error["line"]) == (stage, line)
    assert text in error["message"]
    assert "Traceback" in error["traceback"] or stage == "import"
    err = SourceError.from_json(error)
    assert isinstance(err, HarnessError)
    assert err.stage == stage and err.line == line
    if line is not None:
        assert f"line {line}" in str(err)


def test_torch_operator_ranges_only_when_diagnosing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """diagnose_kernel asks for torch's operator ranges (emit_nvtx, with shapes) so a step's
    kernels group by operator; other requests do not pay for them, and neither does a run
    without CUDA (a CPU build of torch refuses NVTX: the stand-in ncu's CPU runs)."""
    import contextlib

    import torch

    from nsight_agent.engine.harness import runtime

    assert isinstance(runtime.op_ranges(False), contextlib.nullcontext)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert isinstance(runtime.op_ranges(True), contextlib.nullcontext)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert isinstance(runtime.op_ranges(True), torch.autograd.profiler.emit_nvtx)
    plain = request_for("torch_softmax.py", "torch", configs=[{"rows": 2, "cols": 3}])
    assert render.spec_for(plain, tmp_path)[0]["torch_ranges"] is False
    step = plain.model_copy(update={"torch_ranges": True})
    assert render.spec_for(step, tmp_path)[0]["torch_ranges"] is True
