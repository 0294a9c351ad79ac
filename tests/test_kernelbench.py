"""KernelBench's format as an input: detection, the request's defaults, the real
harness and timing path on the CPU, KernelBench's correctness rule and its result view.

The fixtures in ``fixtures/kernelbench/`` are small problems and candidates written for these
tests (a linear layer and ReLU, 8 x 64): an honest rewrite, and candidates that zero their
input, return it, raise, seed their own weights, are close within KernelBench's bounds only,
or go wrong after some calls.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from nsight_agent import kernelbench
from nsight_agent.engine import pipeline
from nsight_agent.engine.harness import render, runtime
from nsight_agent.engine.harness.languages import kernelbench as adapter_module
from nsight_agent.engine.harness.verdicts import Tolerance, Verdicts
from nsight_agent.engine.process import child_env
from nsight_agent.engine.store.runs import PreflightResult
from nsight_agent.engine.worker import timing_run
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.engine.worker.timing_options import TimingOptions
from nsight_agent.judge.builds import build_note
from nsight_agent.request import TIME_METRIC, ProfileRequest
from nsight_agent.service.summaries import compare_summary
from nsight_agent.views.kernelbench import kernelbench_report, render_kernelbench

FIXTURES = Path(__file__).parent / "fixtures" / "kernelbench"
PROBLEM = (FIXTURES / "problem_linear_relu.py").read_text()


def candidate(name: str) -> str:
    return (FIXTURES / f"new_{name}.py").read_text()


def kb_request(names: list[str], **extra: Any) -> ProfileRequest:
    variants = [{"name": "ref"}] + [{"name": n, "source": candidate(n)} for n in names]
    fields = {"source": PROBLEM, "variants": variants, "runs": 5, "warmup": 1, **extra}
    return ProfileRequest.model_validate(fields)


@pytest.fixture(scope="module")
def cpu_pool() -> Iterator[WorkerPool]:
    with WorkerPool() as pool:
        yield pool


# --- detection and the request -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (PROBLEM, True),
        ("class Model:\n    pass\ndef get_inputs():\n    return []\n", True),
        # Our kernel contract: a setup() wins, even beside Model and get_inputs.
        (PROBLEM + "\ndef setup(n, device):\n    return ()\n", False),
        (
            "import torch\ndef setup(n, device):\n    return (torch.ones(n),)\ndef run(x):\n    return x\n",
            False,
        ),
        (candidate("honest"), False),  # a candidate alone: ModelNew, no Model
        ("Model = object\ndef get_inputs():\n    return []\n", False),  # Model is no class
        ("class Model:\n    pass\n", False),  # no get_inputs
        ("class Model(:\n", False),  # does not parse
    ],
)
def test_a_kernelbench_problem_is_detected(source: str, expected: bool) -> None:
    assert kernelbench.is_kernelbench(source) is expected


def test_the_problem_alone_becomes_one_variant_ref_on_its_own_sizes() -> None:
    req = ProfileRequest(source=PROBLEM)
    assert req.language == "kernelbench"
    assert req.expanded_configs() == [{}]
    assert [(v.name, v.entry) for v in req.effective_variants()] == [("ref", "Model")]
    assert req.baseline_name() == "ref"
    # Language None is left out too (a front end passing its unset option).
    assert ProfileRequest.model_validate({"source": PROBLEM, "language": None}).language == (
        "kernelbench"
    )


def test_candidates_measure_their_model_new_and_the_baseline_is_model() -> None:
    req = kb_request(["honest"])
    assert [(v.name, v.entry) for v in req.effective_variants()] == [
        ("ref", "Model"),
        ("honest", "ModelNew"),
    ]
    assert req.baseline_name() == "ref"


def test_a_language_given_is_kept_and_other_sources_still_need_configs() -> None:
    req = ProfileRequest(source=PROBLEM, language="torch", configs=[{}], setup="get_inputs")
    assert req.language == "torch"
    with pytest.raises(ValidationError, match="configs"):
        ProfileRequest(source="def setup(n):\n    return ()\ndef run():\n    pass\n")


def test_request_errors_name_the_constants_and_the_variant() -> None:
    with pytest.raises(ValidationError) as err:
        ProfileRequest(source=PROBLEM, configs=[{"batch": 4}])
    assert "['batch']" in str(err.value) and "batch_size, features" in str(err.value)
    with pytest.raises(ValidationError, match="variant 'bad': its own source defines no class"):
        ProfileRequest(
            source=PROBLEM,
            variants=[
                {"name": "ref"},
                {"name": "bad", "source": PROBLEM.replace("class Model", "class Other")},
            ],
        )
    with pytest.raises(ValidationError, match="needs a problem source"):
        ProfileRequest(source="class Model:\n    pass\n", language="kernelbench")


# --- the adapter -------------------------------------------------------------------------------


def load(tmp_path: Path, name: str, source: str) -> Any:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return runtime.load_user_module(name, str(path))


def test_overrides_reach_get_inputs_and_models_get_equal_weights(tmp_path: Path) -> None:
    problem = load(tmp_path, "kb_problem", PROBLEM)
    honest = load(tmp_path, "kb_honest", candidate("honest"))
    own_seed = load(tmp_path, "kb_own_seed", candidate("own_seed"))
    adapter = adapter_module.Problem(problem, [problem, honest, own_seed], seed=3)
    (x,) = adapter.setup(device="cpu", batch_size=4)
    assert x.shape == (4, 64) and problem.batch_size == 4 and honest.batch_size == 4
    ref = adapter.build(problem.Model)
    assert torch.equal(adapter.build(honest.ModelNew).linear.weight, ref.linear.weight)
    assert not torch.equal(adapter.build(own_seed.ModelNew).linear.weight, ref.linear.weight)
    forward = adapter.entry(honest.ModelNew)
    out = forward(x)
    assert out.shape == (4, 64) and not out.requires_grad
    with pytest.raises(ValueError, match=r"'batch' is not a module constant.*batch_size, features"):
        adapter.setup(device="cpu", batch=4)


def test_trial_seeds_are_fixed_by_the_seed() -> None:
    seeds = adapter_module.trial_seeds(42)
    assert len(seeds) == kernelbench.TRIALS == 5 and len(set(seeds)) == 5
    assert seeds == adapter_module.trial_seeds(42) != adapter_module.trial_seeds(43)


def test_the_trials_keep_every_input_alive_until_the_device_is_synchronized(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """KernelBench's own check holds each model's inputs until it synchronizes; an entry that
    works on a stream of its own reads them after it returns. Every input of a trial must
    still be alive when the trial synchronizes (else the allocator hands its memory to the
    next variant's inputs while that stream reads: seen on the H200 with KernelBench's
    non-default-stream kernel)."""
    import weakref

    def setup(n: int, device: str = "cpu") -> tuple[torch.Tensor]:
        return (torch.randn(n, device=device),)

    seen: list[weakref.ref[torch.Tensor]] = []

    def entry(x: torch.Tensor) -> torch.Tensor:
        seen.append(weakref.ref(x))
        return x * 2

    alive_at_sync: list[list[bool]] = []

    def synchronize(device: str) -> None:
        alive_at_sync.append([r() is not None for r in seen])
        seen.clear()

    monkeypatch.setattr(adapter_module.runtime, "synchronize", synchronize)
    # only the trial's own wait is counted here, not the one that readies each input
    monkeypatch.setattr(
        adapter_module.runtime, "build_inputs", lambda setup, config, device: setup(**config)
    )
    tolerance = Tolerance(table={"float32": (1e-2, 1e-2)})
    verdicts = Verdicts("ref", tolerance, 0, {"n": 8}, runtime.Dropped("ref"))
    entries = {"ref": entry, "new": entry, "other": entry}
    adapter_module.trials(setup, entries, verdicts, device="cpu", seed=1)
    assert verdicts.rows == [] and not verdicts.dropped
    assert len(alive_at_sync) == kernelbench.TRIALS
    assert all(alive == [True, True, True] for alive in alive_at_sync)


# --- the timing path, with the real harness's pre-flight ---------------------------------------


def overall(run: pipeline.RunResult) -> dict[str, str]:
    return {k: v.verdict for k, v in compare_summary(run).overall.items()}


def test_the_problem_alone_is_timed_with_configs_omitted(
    cpu_pool: WorkerPool, tmp_path: Path
) -> None:
    run = pipeline.time_request(
        ProfileRequest(source=PROBLEM, runs=5), cpu_pool, runs_root=tmp_path
    )
    times = run.processed[run.processed["Metric"] == TIME_METRIC]
    assert list(times["Annotation"]) == ["ref"]
    assert bool(times["OutputOK"].iloc[0]) and times["AvgValue"].iloc[0] > 0
    assert [c.ok for c in run.checks] == [True]


def test_candidates_get_their_verdicts_and_kernelbench_fields(
    cpu_pool: WorkerPool, tmp_path: Path
) -> None:
    names = ["honest", "zeroes_input", "returns_input", "raises", "own_seed"]
    run = pipeline.time_request(kb_request(names), cpu_pool, runs_root=tmp_path)
    got = overall(run)
    assert got["ref"] == "baseline"
    # timed and correct; its direction is noise on a loaded CPU (it read "slower" once in CI-like load)
    assert got["honest"] in ("within_noise", "faster", "slower"), run.warnings
    for name in ("zeroes_input", "returns_input", "own_seed"):
        assert got[name] == "incorrect", (name, got)
    # The raising candidate is its own error, with the line in its own file; the rest ran.
    assert got["raises"] == "error"
    raised = run.dropped["raises"]
    assert raised.variant == "raises" and raised.line == 10
    assert "candidate kernel launch failed" in raised.message
    assert set(run.processed["Annotation"]) == {"ref", *names} - {"raises"}

    report = kernelbench_report(compare_summary(run, limit=100))
    by = {r.variant: r for r in report.results}
    assert set(by) == set(names) and report.baseline == "ref"
    honest = by["honest"]
    assert honest.compiled and honest.correctness and honest.speedup is not None
    assert honest.runtime > 0 and honest.ref_runtime > 0
    ns = run.processed.set_index("Annotation").loc["ref", "AvgValue"]
    assert honest.ref_runtime == pytest.approx(ns / 1e6, rel=1e-3)  # ms, as KernelBench
    for name in ("zeroes_input", "returns_input", "own_seed"):
        r = by[name]
        assert r.compiled and not r.correctness and r.runtime == -1.0 and r.speedup is None
        assert r.verdict == "incorrect" and r.reason and "differ" in r.reason
    assert by["raises"].compiled and not by["raises"].correctness
    assert "candidate kernel launch failed" in (by["raises"].reason or "")
    text = render_kernelbench(report)
    assert "honest: compiled=True correctness=True" in text and "[incorrect]" in text
    assert report.compile is None and "compile:" not in text  # nothing here builds
    # A call that built candidates says what the builds cost, as its compare answer does.
    note = "compile: 41.0 s of this call's 88.0 s, before measuring and outside every measured time"
    built = compare_summary(run, limit=100).model_copy(update={"warnings": ["x", note]})
    assert kernelbench_report(built).compile == note
    assert render_kernelbench(kernelbench_report(built)).splitlines()[-1] == note


def test_a_candidate_that_does_not_import_is_not_compiled(
    cpu_pool: WorkerPool, tmp_path: Path
) -> None:
    broken = candidate("honest").replace("import torch\n", "import torch\nimport no_such_module\n")
    req = ProfileRequest(
        source=PROBLEM,
        variants=[{"name": "ref"}, {"name": "broken", "source": broken}],
        runs=5,
    )
    run = pipeline.time_request(req, cpu_pool, runs_root=tmp_path)
    (result,) = kernelbench_report(compare_summary(run)).results
    assert not result.compiled and not result.correctness and result.verdict == "error"


def test_configs_override_module_constants(cpu_pool: WorkerPool, tmp_path: Path) -> None:
    req = kb_request(["honest"], configs={"batch_size": [4, 16]})
    run = pipeline.time_request(req, cpu_pool, runs_root=tmp_path)
    times = run.processed[run.processed["Metric"] == TIME_METRIC]
    assert sorted(times["batch_size"]) == [4, 4, 16, 16]
    assert all(c.ok for c in run.checks) and len(run.checks) == 4


def test_kernelbench_tolerances_accept_what_ours_reject(
    cpu_pool: WorkerPool, tmp_path: Path
) -> None:
    ours = pipeline.time_request(kb_request(["close"]), cpu_pool, runs_root=tmp_path)
    assert overall(ours)["close"] == "incorrect"
    theirs = kb_request(["close"], correctness="kernelbench")
    run = pipeline.time_request(theirs, cpu_pool, runs_root=tmp_path)
    assert overall(run)["close"] in ("within_noise", "faster", "slower"), run.checks


# --- KernelBench's trials, on both paths -------------------------------------------------------


def wrong_after(calls: int, **extra: Any) -> ProfileRequest:
    source = candidate("wrong_later").replace("GOOD_CALLS = 1", f"GOOD_CALLS = {calls}")
    variants = [{"name": "ref"}, {"name": "later", "source": source}]
    return ProfileRequest(source=PROBLEM, variants=variants, runs=2, warmup=1, **extra)


def preflight_manifest(tmp_path: Path, req: ProfileRequest) -> dict[str, Any]:
    """The real harness's pre-flight on the CPU in a new folder ``tmp_path``: its manifest."""
    tmp_path.mkdir()
    render.write_run_files(req, tmp_path, tmp_path / "cache")
    proc = subprocess.run(
        [sys.executable, "harness.py", "--preflight", "--device", "cpu"],
        cwd=tmp_path,
        env=child_env({}),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest: dict[str, Any] = json.loads((tmp_path / "manifest.json").read_text())
    return manifest


def preflight_checks(tmp_path: Path, req: ProfileRequest) -> list[dict[str, Any]]:
    checks = preflight_manifest(tmp_path, req)["checks"]
    return [c for c in checks if c["variant"] == "later" and not c["ok"]]


def test_the_harness_runs_the_trials_right_after_the_first_check(tmp_path: Path) -> None:
    """Right on its first call only: our first timed run catches it, the trials sooner."""
    (ours,) = preflight_checks(tmp_path / "default", wrong_after(1))
    assert ours["message"].startswith("run 0, on new inputs")
    (theirs,) = preflight_checks(tmp_path / "kb", wrong_after(1, correctness="kernelbench"))
    assert theirs["message"].startswith("KernelBench trial 0 (seed ")
    assert theirs["reason"] == "mismatch"


def test_the_timing_path_adds_the_trials_after_its_loop(tmp_path: Path) -> None:
    """Right for the 6 calls the loop makes here (3 warm-up, 3 runs), wrong afterwards."""
    options = TimingOptions(warmup_min=1, warmup_max=3, min_runs=3, max_runs=3)
    results = {}
    for rule in ("default", "kernelbench"):
        run_dir = tmp_path / rule
        run_dir.mkdir()
        render.write_run_files(wrong_after(6, correctness=rule), run_dir, tmp_path / "cache")
        results[rule] = timing_run.time_run_dir(run_dir, "cpu", options)
    later = {rule: [c for c in r.checks if c["variant"] == "later"] for rule, r in results.items()}
    assert [c["ok"] for c in later["default"]] == [True]
    (failed,) = later["kernelbench"]
    assert not failed["ok"] and failed["message"].startswith("KernelBench trial 0")
    rows = {r["Annotation"]: r["OutputOK"] for r in results["kernelbench"].rows}
    assert rows == {"ref": True, "later": False}


REPLACES_IN_A_TRIAL = '''
import sys

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Honest, except that one call (the test picks KernelBench's first trial) makes the
    harness's output comparison pass everything."""

    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 2:
            checks = sys.modules["nsight_agent.engine.harness.checks"]
            checks.compare = lambda *args, **kwargs: None
        return torch.relu(self.linear(x))
'''


def test_a_function_replaced_in_a_trial_is_blamed_on_its_variant_on_both_paths(
    tmp_path: Path,
) -> None:
    """The guard runs after every trial call: the replacement is put back before the next
    variant's call and blamed on the candidate that made it, never on the baseline."""

    def request(call: int) -> ProfileRequest:
        source = REPLACES_IN_A_TRIAL.replace("self.calls == 2", f"self.calls == {call}")
        variants = [{"name": "ref"}, {"name": "swapper", "source": source}]
        return ProfileRequest(
            source=PROBLEM, variants=variants, runs=2, warmup=1, correctness="kernelbench"
        )

    # The pre-flight's first trial is the candidate's 2nd call (after the check call); on
    # the timing path its 4th (after one warm-up and two runs; the trials follow the loop).
    manifest = preflight_manifest(tmp_path / "ncu", request(2))
    assert {s["variant"] for s in manifest["suspects"]} == {"swapper"}, manifest["suspects"]
    assert all("compare" in s["reason"] for s in manifest["suspects"])

    timing_dir = tmp_path / "timing"
    timing_dir.mkdir()
    render.write_run_files(request(4), timing_dir, tmp_path / "cache")
    options = TimingOptions(warmup_min=1, warmup_max=1, min_runs=2, max_runs=2)
    result = timing_run.time_run_dir(timing_dir, "cpu", options)
    assert {s.variant for s in result.suspects} == {"swapper"}, result.suspects


def test_inputs_are_ready_before_any_entry_sees_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Built inputs are waited for on the GPU before build_inputs returns: KernelBench's
    non-blocking-stream kernel read half-made inputs on the H200 and was called incorrect by a
    race of ours, differently on each method."""
    from nsight_agent.engine.harness import runtime

    events: list[str] = []
    monkeypatch.setattr(runtime, "synchronize", lambda device: events.append(f"sync {device}"))

    def setup(n: int, device: str) -> tuple[torch.Tensor]:
        events.append("setup")
        return (torch.ones(n),)

    (x,) = runtime.build_inputs(setup, {"n": 3}, "cuda:0")
    assert events == ["setup", "sync cuda:0"] and x.tolist() == [1.0, 1.0, 1.0]


def test_the_compile_note_says_where_the_rest_of_the_call_went() -> None:
    """The pre-flight's seconds less its builds, then each later stage of 0.1 s or more."""
    pre = PreflightResult(
        ok=True,
        device="cuda",
        seconds=60.0,
        builds=[{"module": "variant_1", "seconds": 54.2, "cache_hit": False}],
    )
    stages = {"created": 0.0, "render": 0.01, "pre-flight": 60.3, "ncu": 18.4, "extract": 1.1}
    note = build_note(pre, kb_request(["honest"]), 80.8, stages)
    assert note is not None and note.startswith("compile: 54.2 s of this call's 80.8 s"), note
    assert note.endswith(
        "; the rest: pre-flight 6.1 s beside the compile, ncu 18.4 s, extract 1.1 s"
    )
    assert build_note(pre, kb_request(["honest"]), 80.8).endswith("compiled in 54.2 s)")
    assert build_note(None, kb_request(["honest"]), 80.8, stages) is None  # nothing built
