"""Variants written to game the comparison get the verdict they deserve.

The source ``fixtures/adversarial/softmax_games.py`` seeds a generator of its own in setup,
so its inputs do not change between runs unless the harness refills them; each variant's
allowed overall verdicts are in ``fixtures/adversarial/required.json`` (shared with
``bench/adversarial.py``, which runs the same suite on the H200 through an MCP client).

On the CPU the timing path runs for real (perf_counter on torch CPU tensors); the ncu path
and the GPU-only variants (side streams, the L2 carve-out) are ``gpu`` tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nsight_agent.engine import pipeline
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.request import ProfileRequest
from nsight_agent.service.summaries import compare_summary

FIXTURES = Path(__file__).parent / "fixtures" / "adversarial"
SOURCE = (FIXTURES / "softmax_games.py").read_text()
REQUIRED = json.loads((FIXTURES / "required.json").read_text())


def request(names: list[str], configs: list[dict[str, Any]], **extra: Any) -> ProfileRequest:
    variants = [{"name": "run", "entry": "run"}] + [{"name": n, "entry": n} for n in names]
    return ProfileRequest.model_validate(
        {
            "source": SOURCE,
            "language": "torch",
            "variants": variants,
            "configs": configs,
            "runs": 5,
            "warmup": 1,
            **extra,
        }
    )


def overall(run: pipeline.RunResult) -> dict[str, str]:
    return {k: v.verdict for k, v in compare_summary(run).overall.items()}


@pytest.fixture(scope="module")
def cpu_pool() -> Any:
    with WorkerPool() as pool:
        yield pool


def test_every_cpu_exploit_gets_its_verdict_on_the_timing_path(
    cpu_pool: WorkerPool, tmp_path: Path
) -> None:
    names = REQUIRED["cpu"]
    configs = [{"rows": 64, "cols": 1000}, {"rows": 32, "cols": 4096}]
    run = pipeline.time_request(request(names, configs), cpu_pool, runs_root=tmp_path)
    got = overall(run)
    wrong = {n: got.get(n) for n in names if got.get(n) not in REQUIRED["vary"][n]}
    assert not wrong, (wrong, run.warnings)
    assert got["run"] == "baseline"
    # Said once, with what the harness did about it.
    assert any("setup ignores the seed" in w for w in run.warnings)
    # The raising variant is a row with its message and line; the others were measured.
    raised = run.dropped["raises"]
    assert raised.verdict == "error" and raised.line and "broken" in raised.message
    measured = set(run.processed["Annotation"])
    assert "honest" in measured and "raises" not in measured


def test_without_input_variation_a_cache_is_still_not_faster(
    cpu_pool: WorkerPool, tmp_path: Path
) -> None:
    """options.vary_inputs=false: the inputs repeat, so a cache returns right values; the
    storage check (the same output tensor every call) still makes it suspect."""
    names = ["honest", "cache_by_shape", "returns_input", "raises", "lazy_output"]
    configs = [{"rows": 64, "cols": 1000}]
    run = pipeline.time_request(
        request(names, configs, vary_inputs=False), cpu_pool, runs_root=tmp_path
    )
    got = overall(run)
    wrong = {n: got.get(n) for n in names if got.get(n) not in REQUIRED["fixed"][n]}
    assert not wrong, (wrong, run.warnings)
    assert not any("setup ignores the seed" in w for w in run.warnings)


def test_a_bad_variant_is_a_row_and_the_others_are_compared(
    cpu_pool: WorkerPool, tmp_path: Path
) -> None:
    """Four variants, one raising and one returning no tensors: two rows with their verdicts,
    two compared; the call fails only when the baseline fails."""
    names = ["honest", "raises", "lazy_output"]
    run = pipeline.time_request(
        request(names, [{"rows": 16, "cols": 1000}]), cpu_pool, runs_root=tmp_path
    )
    s = compare_summary(run)
    assert s.overall["raises"].verdict == "error"
    assert s.overall["lazy_output"].verdict == "suspect"
    assert s.overall["honest"].verdict in REQUIRED["vary"]["honest"]
    row = s.configs[0].variants
    assert row["raises"].time is None and "RuntimeError" in (row["raises"].check or "")
    assert row["honest"].speedup is not None and row["lazy_output"].speedup is None


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["ncu", "timing"])
def test_every_exploit_gets_its_verdict_on_a_gpu(method: str, tmp_path: Path) -> None:
    names = list(REQUIRED["vary"])
    configs = [{"rows": 4096, "cols": 1000}, {"rows": 4096, "cols": 4096}]
    req = request(names, configs)
    if method == "ncu":
        run = pipeline.profile(req, runs_root=tmp_path)
    else:
        with WorkerPool() as pool:
            run = pipeline.time_request(req, pool, runs_root=tmp_path, device="cuda:0")
    got = overall(run)
    wrong = {n: got.get(n) for n in names if got.get(n) not in REQUIRED["vary"][n]}
    assert not wrong, (wrong, run.warnings)


def test_a_source_that_replaces_the_checker_at_import_makes_every_variant_suspect(
    cpu_pool: WorkerPool, tmp_path: Path
) -> None:
    """Replaced while imported, before any call: no variant's numbers are trusted."""
    source = SOURCE + "\n\ntorch.allclose = lambda *args, **kwargs: True\n"
    req = ProfileRequest.model_validate(
        {
            "source": source,
            "language": "torch",
            "variants": [{"name": "run", "entry": "run"}, {"name": "honest", "entry": "honest"}],
            "configs": [{"rows": 16, "cols": 1000}],
            "runs": 5,
        }
    )
    run = pipeline.time_request(req, cpu_pool, runs_root=tmp_path)
    assert overall(run)["honest"] == "suspect"
    assert any("replaced torch.allclose" in w for w in run.warnings)


def test_a_variant_replacing_a_checked_function_on_its_first_call_only_is_the_suspect(
    tmp_path: Path,
) -> None:
    """Replaced during the pre-flight's first (check) call and never again: the harness puts
    it back at once and blames that variant, not the next one called (it was the baseline,
    called first; on the H200 a no-op ``torch.cuda.synchronize`` so left in place made the
    baseline's next pre-flight count read 0 kernels)."""
    source = SOURCE + (
        "\n\n_ONCE = []\n\n\ndef replaces_once(x):\n"
        "    if not _ONCE:\n"
        "        _ONCE.append(torch.allclose)\n"
        "        torch.allclose = lambda *args, **kwargs: True\n"
        "    return torch.softmax(x, dim=-1)\n"
    )
    names = ["replaces_once", "honest"]
    req = ProfileRequest.model_validate(
        {
            "source": source,
            "language": "torch",
            "variants": [{"name": "run", "entry": "run"}]
            + [{"name": n, "entry": n} for n in names],
            "configs": [{"rows": 16, "cols": 1000}],
            "runs": 5,
        }
    )
    pre = pipeline.preflight(req, runs_root=tmp_path, device="cpu")
    blamed = {s.variant for s in pre.suspects}
    assert blamed == {"replaces_once"}, pre.suspects


def test_the_harness_waits_with_the_synchronize_it_had_before_user_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from nsight_agent.engine.harness import runtime

    waited: list[str] = []
    monkeypatch.setattr(runtime, "_SYNC", [])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: waited.append("original"))
    runtime.pin_synchronize()
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: waited.append("replaced"))
    runtime.pin_synchronize()  # a second pin keeps the first
    runtime.synchronize("cuda:0")
    runtime.synchronize("cpu")
    assert waited == ["original"]
