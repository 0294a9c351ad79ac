"""The pipeline on a CPU-only machine: pre-flight of every contract example, correctness
verdicts, the exact error of each broken source, and stopping before ncu is ever run."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from nsight_agent.engine import pipeline
from nsight_agent.engine.collection import check, preflight_run
from nsight_agent.engine.collection.collect import early
from nsight_agent.engine.harness import cuda_build
from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.harness.languages import adapter_for
from nsight_agent.engine.harness.languages.torch_compile import TorchCompileAdapter
from nsight_agent.engine.harness.spec import read_spec
from nsight_agent.errors import InvalidRequestError, NsightAgentError, RunCancelledError
from nsight_agent.request import ProfileRequest, Variant

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "contract"
needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="nvcc is not installed")


def example(name: str) -> str:
    return (EXAMPLES / name).read_text()


def request(source: str, language: str = "torch", **kwargs: Any) -> ProfileRequest:
    fields: dict[str, Any] = {
        "source": source,
        "language": language,
        "configs": {"n": [1000]},
        "runs": 2,
        "warmup": 1,
    }
    fields.update(kwargs)
    return ProfileRequest.model_validate(fields)


def preflight(req: ProfileRequest, root: Path) -> pipeline.PreflightResult:
    return pipeline.preflight(req, runs_root=root, device="cpu")


# --- the examples pass ------------------------------------------------------------------------


def test_triton_example_passes_preflight_in_the_interpreter(tmp_path: Path) -> None:
    req = request(
        example("triton_vector_add.py"),
        "triton",
        configs={"n": [1000, 5000], "block_size": [256, 1024]},
        variants=[Variant(name="torch", entry="reference"), Variant(name="triton", entry="run")],
        baseline="torch",
    )
    result = preflight(req, tmp_path)
    assert result.ok, result.errors
    assert result.device == "cpu"
    assert len(result.checks) == 2 * 4
    assert all(c.ok for c in result.checks)
    assert {c.variant for c in result.checks if c.max_abs_err == 0.0} == {"triton"}
    assert result.kernels_per_call is None  # kernels are counted on a GPU only
    assert result.copies_ns == {}  # and copies too
    run_dir = tmp_path / str(result.run_id)
    for name in ("request.json", "harness.py", "user_source.py", "preflight-manifest.json"):
        assert (run_dir / name).is_file(), name


def test_torch_example_with_two_dtypes_passes(tmp_path: Path) -> None:
    req = request(
        example("torch_softmax.py"),
        configs={"rows": [16], "cols": [300], "dtype": ["float32", "bfloat16"]},
        variants=[Variant(name="torch"), Variant(name="manual", entry="manual_softmax")],
    )
    result = preflight(req, tmp_path)
    assert result.ok, result.errors
    assert [(c.variant, c.config["dtype"], c.ok) for c in result.checks] == [
        ("torch", "float32", True),
        ("manual", "float32", True),
        ("torch", "bfloat16", True),
        ("manual", "bfloat16", True),
    ]


def test_torch_compile_example_compiles_and_matches_on_cpu(tmp_path: Path) -> None:
    """Inductor's CPU backend compiles the entries for real (about 30 s on 2 cores)."""
    req = request(
        example("torch_compile_gelu.py"),
        "torch_compile",
        variants=[Variant(name="ref", entry="reference"), Variant(name="compiled", entry="run")],
    )
    result = preflight(req, tmp_path)
    assert result.ok, result.errors
    assert [(c.variant, c.ok) for c in result.checks] == [("ref", True), ("compiled", True)]
    spec = read_spec(tmp_path / str(result.run_id) / "harness.py")
    assert adapter_for(spec["language"]) is TorchCompileAdapter  # wraps every entry


@needs_nvcc
def test_cuda_example_compiles_with_nvcc_and_is_cached(tmp_path: Path) -> None:
    req = request(
        example("cuda_vector_add.py"),
        "cuda",
        variants=[Variant(name="torch", entry="reference"), Variant(name="cuda", entry="run")],
    )
    first = preflight(req, tmp_path)
    assert first.ok, first.errors
    assert first.notes == ["no GPU: the CUDA source was compiled, not run"]
    assert first.cuda_build is not None and first.cuda_build["cache_hit"] is False
    assert first.cuda_build["seconds"] > 0
    second = preflight(req, tmp_path)
    assert second.cuda_build is not None and second.cuda_build["cache_hit"] is True
    assert second.cuda_build["key"] == first.cuda_build["key"]


# --- correctness ------------------------------------------------------------------------------

# Subtracts where the reference adds: profiled, but flagged wrong.
WRONG_TRITON = (Path(__file__).parent / "fixtures" / "sources" / "wrong_triton.py").read_text()


def test_a_wrong_variant_is_caught_per_config_with_its_errors(tmp_path: Path) -> None:
    req = request(
        example("triton_vector_add.py"),
        "triton",
        configs={"n": [100, 2000]},
        variants=[
            Variant(name="torch", entry="reference"),
            Variant(name="good", entry="run"),
            Variant(name="bad", entry="wrong", source=WRONG_TRITON),
        ],
    )
    result = preflight(req, tmp_path)
    assert not result.ok and result.stage == "check"
    verdicts = {(c.variant, c.config_index): c for c in result.checks}
    assert all(verdicts[("good", i)].ok for i in range(2))
    for i in range(2):
        bad = verdicts[("bad", i)]
        assert not bad.ok and bad.reason == "mismatch"
        assert bad.max_abs_err is not None and bad.max_abs_err > 0.1
        assert bad.max_rel_err is not None and bad.max_rel_err > 0.1
    assert len(result.errors) == 2
    assert all("variant 'bad'" in e for e in result.errors)


def test_tolerances_from_the_request_are_used(tmp_path: Path) -> None:
    source = (
        "import torch\n"
        "def setup(n, device):\n"
        "    return (torch.ones(n, device=device),)\n"
        "def run(x):\n"
        "    return x * 2\n"
        "def close(x):\n"
        "    return x * 2 + 1e-3\n"
    )
    variants = [Variant(name="ref"), Variant(name="close", entry="close")]
    strict = preflight(request(source, variants=variants), tmp_path)
    assert [c.ok for c in strict.checks] == [True, False]
    loose = preflight(request(source, variants=variants, rtol=1e-3, atol=1e-3), tmp_path)
    assert [c.ok for c in loose.checks] == [True, True]


# --- broken sources: the exact error --------------------------------------------------------

SETUP = "import torch\n\ndef setup(n, device):\n    return (torch.ones(n, device=device),)\n\n"


@pytest.mark.parametrize(
    ("source", "stage", "line", "text"),
    [
        (SETUP + "def run(x)\n    return x\n", "import", 6, "SyntaxError"),
        (
            "import torch\n\ndef setup(n, device):\n    return (torch.ones(n, dtype='f32'),)\n\n"
            "def run(x):\n    return x\n",
            "setup",
            4,
            "TypeError",
        ),
        (SETUP + "def run(x):\n    return x.view(3, -1)\n", "entry", 7, "RuntimeError"),
    ],
)
def test_broken_source_reports_stage_and_line(
    tmp_path: Path, source: str, stage: str, line: int, text: str
) -> None:
    result = preflight(request(source), tmp_path)
    assert not result.ok
    assert (result.stage, result.line) == (stage, line)
    assert len(result.errors) == 1
    assert result.errors[0].startswith(f"{stage} failed (user_source.py line {line})")
    assert text in result.errors[0]


def test_wrong_output_shape_is_a_check_error(tmp_path: Path) -> None:
    source = SETUP + "def run(x):\n    return x * 2\n\ndef bad(x):\n    return x[:-1] * 2\n"
    req = request(source, variants=[Variant(name="ref"), Variant(name="bad", entry="bad")])
    result = preflight(req, tmp_path)
    assert not result.ok and result.stage == "check"
    bad = result.checks[1]
    assert (bad.variant, bad.ok, bad.reason) == ("bad", False, "shape")
    assert bad.message == "out has shape (999,), baseline (1000,)"


def test_kernel_counts_of_a_gpu_preflight_are_checked_per_variant_and_config() -> None:
    # A CPU pre-flight lists no kernels (None); on a GPU the harness lists each call's kernels
    # (tests/test_pipeline_gpu.py runs the real thing). Here: the verdict on such a manifest.
    def call(variant: str, config: int, kernels: list[str]) -> dict[str, Any]:
        return {"variant": variant, "config": config, "kernels": kernels}

    calls = [call("run", 0, ["k"]), call("run", 0, ["k"]), call("run", 1, ["k", "k"])]
    calls += [call("flaky", 0, ["k"]), call("flaky", 0, ["k", "add"])]
    calls += [call("cached", 1, []), call("cached", 1, [])]
    calls += [call("never", 1, []), call("never", 1, [])]
    # The first (correctness) call's kernels, per config: 'cached' launched one there.
    first = [{"run": 1, "flaky": 1}, {"run": 2, "cached": 1, "never": 0}]
    manifest = {"calls": calls, "checks": [], "first_kernels": first}
    result = pipeline.PreflightResult(ok=True, device="cuda", seconds=1.0)
    preflight_run._add_check_errors(result, manifest, "run")
    # Variants other than the baseline fail alone: dropped with their verdicts, not raised.
    assert not result.ok and result.stage == "variant"
    assert result.errors == [
        "variant 'flaky', config #0: the number of kernels changes between runs ([1, 2]); "
        "warm up autotuners/caches in the first call or use replay_mode='range'",
        "variant 'cached', config #1: its first call launched 1 kernel(s) and its measured "
        "calls none: it returns a result kept from an earlier call, so its time is not its "
        "work's",
        "variant 'never', config #1: the entry launched no CUDA kernel (are the tensors on "
        "the GPU? does it return a cached result?)",
    ]
    assert {k: v.verdict for k, v in result.dropped.items()} == {
        "flaky": "suspect",
        "cached": "suspect",
        "never": "no_kernel",
    }
    assert result.dropped["cached"].config_index == 1
    # Wrong values are the stronger truth: a cache that fails the check is incorrect.
    wrong = pipeline.OutputCheck(
        variant="cached", config_index=1, config={}, ok=False, message="values differ"
    )
    checked = pipeline.PreflightResult(ok=True, device="cuda", seconds=1.0, checks=[wrong])
    preflight_run._add_check_errors(checked, manifest, "run")
    assert checked.dropped["cached"].verdict == "incorrect"
    assert checked.dropped["cached"].stage == "check"
    assert checked.dropped["cached"].message.startswith("values differ; and its first call")
    preflight_run.raise_if_broken(result)  # a variant's failure does not end the run
    # The baseline's own failure does: nothing can be compared without it.
    base = pipeline.PreflightResult(ok=True, device="cuda", seconds=1.0)
    preflight_run._add_check_errors(base, {"calls": calls, "checks": []}, "never")
    assert base.stage == "entry" and "never" not in base.dropped
    with pytest.raises(SourceError, match="launched no CUDA kernel"):
        preflight_run.raise_if_broken(base)
    clean = pipeline.PreflightResult(ok=True, device="cuda", seconds=1.0)
    preflight_run._add_check_errors(clean, {"calls": calls[:3], "checks": []}, "run")
    assert clean.ok and clean.errors == [] and clean.dropped == {}


@needs_nvcc
def test_cuda_compile_error_reports_the_compiler_message_and_line(tmp_path: Path) -> None:
    cuda = "#include <torch/extension.h>\n\ntorch::Tensor twice(torch::Tensor x) {\n  return x * undefined_name;\n}\n"
    source = SETUP + "def run(ext, x):\n    return ext.twice(x)\n"
    req = request(source, "cuda", cuda_source=cuda, cuda_functions=["twice"])
    result = preflight(req, tmp_path)
    assert not result.ok
    assert (result.stage, result.line) == ("compile", 4)
    assert 'line 4: error: identifier "undefined_name" is undefined' in result.errors[0]


def test_cuda_without_functions_to_expose_is_a_compile_error(tmp_path: Path) -> None:
    req = request(SETUP + "def run(ext, x):\n    return x\n", "cuda", cuda_source="int f();\n")
    result = preflight(req, tmp_path)
    assert (result.ok, result.stage) == (False, "compile")
    assert "no CUDA functions to expose" in result.errors[0]


# --- profile(): nothing reaches ncu when the source is broken ------------------------------


@pytest.fixture
def fake_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An `ncu` that records being called: profile() must stop before it. In the staged order
    (``NSIGHT_AGENT_EARLY_NCU=0``): by default ncu starts beside the pre-flight and waits at
    a gate, and tests/test_engine_early_ncu.py holds these cases for that order."""
    monkeypatch.setenv(early.ENV, "0")
    marker = tmp_path / "ncu-was-called"
    script = tmp_path / "ncu"
    script.write_text(f'#!/bin/sh\necho "$@" > {marker}\nexit 1\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("NCU", str(script))
    return marker


@pytest.mark.parametrize(
    ("source", "variants", "stage"),
    [
        (SETUP + "def run(x)\n    return x\n", [], "import"),
        (  # the baseline raising: nothing can be compared
            SETUP + "def run(x):\n    raise ValueError('no')\n\ndef ok(x):\n    return x\n",
            [Variant(name="ref"), Variant(name="ok", entry="ok")],
            "entry",
        ),
    ],
)
def test_profile_stops_before_ncu_on_a_broken_source(
    tmp_path: Path, fake_ncu: Path, source: str, variants: list[Variant], stage: str
) -> None:
    with pytest.raises(SourceError) as info:
        pipeline.profile(request(source, variants=variants), runs_root=tmp_path / "runs")
    assert info.value.stage == stage
    assert not fake_ncu.exists()


def test_a_variant_that_fails_alone_is_dropped_and_the_others_go_to_ncu(
    tmp_path: Path, fake_ncu: Path
) -> None:
    """A variant with outputs of the wrong dtype and one that raises cost their own rows: the
    pre-flight drops them with their verdicts and ncu runs the harness without them."""
    source = SETUP + "def run(x):\n    return x * 2\n\ndef bad(x):\n    return x.double()\n"
    source += "def boom(x):\n    raise RuntimeError('boom')\n"
    variants = [Variant(name="ref"), Variant(name="bad", entry="bad")]
    variants.append(Variant(name="boom", entry="boom"))
    with pytest.raises(NsightAgentError):  # the fake ncu fails; what matters is its argv
        pipeline.profile(request(source, variants=variants), runs_root=tmp_path / "runs")
    assert "--skip bad,boom" in fake_ncu.read_text()
    pre = preflight_run.result_from_files(
        next(d for d in (tmp_path / "runs").iterdir() if not d.name.startswith(".")),
        request(source, variants=variants),
        "cpu",
        0,
        0.0,
    )
    assert pre.dropped["bad"].verdict == "incorrect" and pre.dropped["bad"].reason == "dtype"
    assert pre.dropped["boom"].verdict == "error" and pre.dropped["boom"].stage == "entry"
    assert "boom" in pre.dropped["boom"].message and pre.dropped["boom"].line == 12
    preflight_run.raise_if_broken(pre)


def test_profile_can_be_cancelled(tmp_path: Path, fake_ncu: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    seen: list[tuple[int, int, str]] = []
    with pytest.raises(RunCancelledError):
        pipeline.profile(
            request(SETUP + "def run(x):\n    return x * 2\n"),
            runs_root=tmp_path / "runs",
            on_progress=lambda d, t, m: seen.append((d, t, m)),
            cancel=cancel,
        )
    assert seen[0] == (0, 2, "pre-flight: running the harness once without the profiler")
    assert not fake_ncu.exists()


# --- runs on disk -----------------------------------------------------------------------------


def test_default_runs_root_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", "/somewhere/runs")
    assert pipeline.default_runs_root() == Path("/somewhere/runs")
    monkeypatch.delenv("NSIGHT_AGENT_RUNS")
    assert pipeline.default_runs_root() == Path.home() / ".cache/nsight-agent/runs"


def test_saved_result_loads_back(tmp_path: Path) -> None:
    run_dir = tmp_path / "20260101-000000-abcdef"
    run_dir.mkdir()
    req = request(SETUP + "def run(x):\n    return x\n")
    (run_dir / "request.json").write_text(req.model_dump_json())
    check = pipeline.OutputCheck(
        variant="run", config_index=0, config={"n": 1000}, ok=True, message="finite"
    )
    frame = pd.DataFrame({"Annotation": ["run"], "n": [1000], "AvgValue": [1.5]})
    result = pipeline.RunResult(
        run_id=run_dir.name,
        run_dir=run_dir,
        request=req,
        processed=frame,
        raw=frame,
        checks=[check],
        kernels={"run": ["k"]},
        warnings=["w"],
        artifacts={},
        seconds=1.25,
    )
    pipeline.save_result(result)
    loaded = pipeline.load_run(run_dir.name, runs_root=tmp_path)
    assert loaded.request == req
    assert loaded.checks == [check]
    assert (loaded.kernels, loaded.warnings, loaded.seconds) == ({"run": ["k"]}, ["w"], 1.25)
    pd.testing.assert_frame_equal(loaded.processed, frame)
    assert loaded.ok("run", 0) and not loaded.ok("other", 0)
    assert loaded.artifacts["result"] == run_dir / "result.json"


@pytest.mark.parametrize("run_id", ["", "../etc", "a/b", ".hidden", "missing"])
def test_load_run_refuses_bad_or_unknown_ids(tmp_path: Path, run_id: str) -> None:
    with pytest.raises(InvalidRequestError):
        pipeline.load_run(run_id, runs_root=tmp_path)


def test_preflight_needs_no_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", os.defpath)
    monkeypatch.delenv("NCU", raising=False)
    result = preflight(request(SETUP + "def run(x):\n    return x + 1\n"), tmp_path)
    assert result.ok, result.errors


# --- the half after ncu, on the CPU: a stand-in ncu drops a recorded report into place ---------

STAND_IN_NCU = """#!{python}
# A stand-in for ncu: records its argv, then puts the H200 sweep's report and manifest where
# the real run would have left them (the --export base and the harness's folder).
import json, shutil, sys
from pathlib import Path
argv = sys.argv[1:]
Path({argv_log!r}).write_text(json.dumps(argv))
base = argv[argv.index("--export") + 1]
shutil.copy({report!r}, base + ".ncu-rep")
Path(argv[argv.index("--log-file") + 1]).write_text("==PROF== Disconnected\\n")
shutil.copy({manifest!r}, Path.cwd() / "manifest.json")
"""

SWEEP_SOURCE = """
import torch

def setup(n, device="cpu"):
    return (torch.arange(n, dtype=torch.float32, device=device),)

def triton_add(x):
    return x + x

def triton_scale(x):
    return x * 2.0
"""


def test_post_ncu_half_of_the_pipeline_on_a_recorded_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sweep: Any
) -> None:
    """Everything after ncu (manifest, extraction, grouping by variant, aggregation, the
    output-check column, the saved run) on the real report of the H200 sweep."""
    import json
    import sys

    metrics = ["gpu__time_duration.sum", "dram__bytes.sum"]
    ncu = tmp_path / "ncu"
    argv_log = tmp_path / "argv.json"
    ncu.write_text(
        STAND_IN_NCU.format(
            python=sys.executable,
            argv_log=str(argv_log),
            report=str(sweep.report),
            manifest=str(sweep.manifest),
        )
    )
    ncu.chmod(ncu.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("NCU", str(ncu))
    monkeypatch.setenv(early.ENV, "0")  # the stand-in answers at once, with no gate
    monkeypatch.setattr(pipeline, "_default_device", lambda: "cpu")
    req = request(
        SWEEP_SOURCE,
        configs={"n": [4096, 65536, 1048576]},
        variants=[
            Variant(name="triton_add", entry="triton_add"),
            Variant(name="triton_scale", entry="triton_scale"),
        ],
        metrics=metrics,
        runs=3,
    )
    run = pipeline.profile(req, runs_root=tmp_path / "runs")

    argv = json.loads(argv_log.read_text())
    # Variants are compared: ncu also collects the work check's instructions (engine/
    # collection/check.py). This report was recorded without them: no work check, and the
    # answer holds the metrics asked for.
    assert argv[argv.index("--metrics") + 1] == ",".join([*metrics, "smsp__inst_executed.sum"])
    assert argv[-4:] == [sys.executable, "harness.py", "--device", "cuda"]
    _, expected = sweep.frames(metrics)
    got = run.processed.set_index(["Annotation", "Metric", "n"])["AvgValue"]
    want = expected.set_index(["Annotation", "Metric", "n"])["AvgValue"]
    assert len(got) == len(want) == 2 * 2 * 3
    for key, value in want.items():
        assert got[key] == pytest.approx(value)
    assert run.kernels == {"triton_add": ["add_kernel"], "triton_scale": ["scale_kernel"]}
    assert run.processed["OutputOK"].all()  # both variants' outputs matched on the CPU
    again = pipeline.load_run(run.run_id, runs_root=tmp_path / "runs")
    assert again.processed["AvgValue"].tolist() == pytest.approx(run.processed["AvgValue"].tolist())


GAMING = """
import torch

def setup(n, device):
    return (torch.randn(n, device=device),)

def honest(x):
    return x * 2

_memo = {}

def memoised(x):  # memoised by shape, as the softmax variant seen on the H200
    if x.shape not in _memo:
        _memo[x.shape] = x * 2
    return _memo[x.shape]

_last = []

def stale(x):  # hands back the previous call's result
    _last.append(x * 2)
    return _last.pop(0) if len(_last) > 1 else _last[0]
"""


def test_memoised_and_stale_variants_fail_the_per_run_checks_of_the_real_harness(
    tmp_path: Path,
) -> None:
    """Every measured run gets inputs of a new seed and is checked against the baseline, so a
    result cached by shape or from the previous call is called wrong, never timed as faster."""
    req = request(
        GAMING,
        variants=[
            Variant(name="honest", entry="honest"),
            Variant(name="memo", entry="memoised"),
            Variant(name="stale", entry="stale"),
        ],
        configs={"n": [1000, 4000]},
    )
    result = preflight(req, tmp_path)
    assert result.stage == "check" and not result.ok
    failing = {(c.variant, c.config_index): c for c in result.checks if not c.ok}
    assert {v for v, _ in failing} == {"memo", "stale"}
    for key in [("memo", 0), ("memo", 1), ("stale", 0)]:  # right on the first call, not later
        assert failing[key].reason == "mismatch", failing[key]
        assert failing[key].message.startswith("run 0, on new inputs"), failing[key]
    assert failing[("stale", 1)].reason == "shape"  # config 0's output handed back
    honest = [c for c in result.checks if c.variant == "honest"]
    assert honest and all(c.ok for c in honest)
    manifest = json.loads((tmp_path / str(result.run_id) / "preflight-manifest.json").read_text())
    order = [(c["config"], c["run"], c["variant"]) for c in manifest["calls"]]
    assert order[:6] == [
        (0, 0, "honest"), (0, 0, "memo"), (0, 0, "stale"),
        (0, 1, "stale"), (0, 1, "memo"), (0, 1, "honest"),
    ]  # fmt: skip


def test_kernels_per_run_are_counted_call_by_call_not_across_configs() -> None:
    """A torch baseline that launches one kernel per run, a different one per config, does
    not launch "2 kernels per run" (the H200 comparison that said so merged the configs)."""
    from nsight_agent.engine.collection.extract import ActionRecord

    def rec(call: int, annotation: str, kernel: str) -> ActionRecord:
        return ActionRecord(call, kernel, annotation, call, {}, {}, "H200", 0.0, 0.0)

    records = [
        rec(0, "torch", "gemv_small"),  # config 0
        rec(1, "torch", "gemm_splitk"),  # config 1: another algorithm, still one kernel
        rec(2, "fused", "scale"),
        rec(2, "fused", "add"),  # two kernels in one call
        rec(3, "fused", "scale"),
        rec(3, "fused", "add"),
        rec(3, "fused", "memset_helper"),
    ]
    most = check.most_kernels_per_run(records, ["torch", "fused", "idle"], [])
    assert most == {"torch": 1, "fused": 3, "idle": 0}
    assert check.most_kernels_per_run(records, ["fused"], ["memset_helper"]) == {"fused": 2}


def test_a_harness_that_died_silently_is_named_without_a_blank_tail(tmp_path: Path) -> None:
    """No error file (os._exit, a signal): the message says so with the exit status; the
    output's tail follows on its own line only when the program printed something."""
    silent = preflight_run.source_error(tmp_path / "absent.json", "  \n", -11)
    assert silent.message.endswith("os._exit() in your source?"), repr(silent.message)
    assert "(exit status -11)" in silent.message
    loud = preflight_run.source_error(tmp_path / "absent.json", "Segmentation fault", 139)
    assert loud.message.endswith("in your source?\nSegmentation fault"), repr(loud.message)
