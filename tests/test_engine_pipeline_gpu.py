"""pipeline.profile under ncu on a GPU: only the user's kernels are measured (never set-up or
warm-up kernels), CUDA builds are cached, and a wrong variant is flagged, not ranked.

Skipped (conftest) without a CUDA GPU and ncu; run with `pytest -m gpu`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nsight_agent.engine import pipeline
from nsight_agent.request import TIME_METRIC, ProfileRequest, Variant

pytestmark = pytest.mark.gpu

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "contract"
# Kernels that set-up (torch.randn, empty_like, copies) would launch: never inside a range.
SETUP_KERNEL_WORDS = ("normal", "distribution", "philox", "fill", "copy")

# The CPU pipeline test's wrong variant, profiled here for real.
WRONG_TRITON = (Path(__file__).parent / "fixtures" / "sources" / "wrong_triton.py").read_text()


def request(example: str, language: str, variants: list[Variant], **kwargs: Any) -> ProfileRequest:
    fields: dict[str, Any] = {
        "source": (EXAMPLES / example).read_text(),
        "language": language,
        "configs": {"n": [1 << 20]},
        "variants": variants,
        "runs": 3,
        "warmup": 2,
    }
    fields.update(kwargs)
    return ProfileRequest.model_validate(fields)


def assert_only_user_kernels(result: pipeline.RunResult) -> None:
    for variant, names in result.kernels.items():
        assert names, f"no kernel profiled for {variant}"
        for name in names:
            assert not any(w in name.lower() for w in SETUP_KERNEL_WORDS), (variant, name)
    assert set(result.processed["Annotation"]) == set(result.kernels)
    assert result.processed["OutputOK"].all()
    assert all(c.ok for c in result.checks)


def test_triton_kernel(tmp_path: Path) -> None:
    req = request(
        "triton_vector_add.py",
        "triton",
        [Variant(name="torch", entry="reference"), Variant(name="triton", entry="run")],
    )
    result = pipeline.profile(req, runs_root=tmp_path)
    assert result.kernels["triton"] == ["add_kernel"]
    assert_only_user_kernels(result)
    timed = result.processed[result.processed["Metric"] == TIME_METRIC]
    assert (timed["NumRuns"] == 3).all()  # the per-call rows beside them count the timed calls
    assert result.artifacts["report"].is_file()
    again = pipeline.load_run(result.run_id, runs_root=tmp_path)
    assert again.kernels == result.kernels and again.checks == result.checks


def test_torch_function(tmp_path: Path) -> None:
    req = request(
        "torch_softmax.py",
        "torch",
        [Variant(name="torch"), Variant(name="manual", entry="manual_softmax")],
        configs={"rows": [1024], "cols": [1024]},
    )
    result = pipeline.profile(req, runs_root=tmp_path)
    assert any("softmax" in k.lower() for k in result.kernels["torch"])
    assert len(result.kernels["manual"]) >= 3  # max, exp, sum, divide: summed per run
    assert_only_user_kernels(result)
    assert result.preflight is not None and result.preflight.kernels_per_call is not None


def test_torch_compile_function(tmp_path: Path) -> None:
    req = request(
        "torch_compile_gelu.py",
        "torch_compile",
        [Variant(name="ref", entry="reference"), Variant(name="compiled", entry="run")],
    )
    result = pipeline.profile(req, runs_root=tmp_path)
    assert all(k.startswith("triton_") for k in result.kernels["compiled"]), result.kernels
    assert_only_user_kernels(result)


def test_cuda_kernel_is_built_once_and_cached(tmp_path: Path) -> None:
    req = request(
        "cuda_vector_add.py",
        "cuda",
        [Variant(name="torch", entry="reference"), Variant(name="cuda", entry="run")],
    )
    first = pipeline.profile(req, runs_root=tmp_path)
    second = pipeline.profile(req, runs_root=tmp_path)
    for name, run in (("first", first), ("second", second)):  # shown by pytest -rA
        print(name, run.run_id, run.cuda_build, run.facts.profile_cuda_build)
    assert first.kernels["cuda"] == second.kernels["cuda"]
    assert all("add_kernel" in k for k in first.kernels["cuda"])
    assert_only_user_kernels(first)
    assert first.cuda_build is not None and second.cuda_build is not None
    assert (first.cuda_build["cache_hit"], second.cuda_build["cache_hit"]) == (False, True)
    assert first.cuda_build["seconds"] > second.cuda_build["seconds"] >= 0
    assert first.cuda_build["mode"] == "load_inline"
    # The profiled process reuses the pre-flight's build as well.
    assert first.facts.profile_cuda_build is not None
    assert first.facts.profile_cuda_build["cache_hit"] is True


def test_wrong_variant_is_profiled_but_flagged(tmp_path: Path) -> None:
    req = request(
        "triton_vector_add.py",
        "triton",
        [
            Variant(name="torch", entry="reference"),
            Variant(name="bad", entry="wrong", source=WRONG_TRITON),
        ],
    )
    result = pipeline.profile(req, runs_root=tmp_path)
    assert result.ok("torch", 0) and not result.ok("bad", 0)
    timed = result.processed[result.processed["Metric"] == TIME_METRIC]
    rows = timed.set_index("Annotation")["OutputOK"]
    assert bool(rows["torch"]) and not bool(rows["bad"])
    assert any("'bad' is WRONG" in w for w in result.warnings)


CHEATS = """
import torch

STATE = {"calls": 0, "cached": None}


def setup(n, device):
    # Data, not a buffer (a constant tensor would be kept as set up): the harness refills it.
    return (torch.arange(n, dtype=torch.float32, device=device),)


def run(x):
    return x * 2


def flaky(x):
    # An extra kernel on every other call: the measured runs would not be comparable.
    STATE["calls"] += 1
    y = x * 2
    return y + 0 if STATE["calls"] % 2 else y


def cached(x):
    # Computes once, then returns the stored result: nothing left to measure.
    if STATE["cached"] is None:
        STATE["cached"] = x * 2
    return STATE["cached"]
"""


def test_preflight_on_gpu_catches_changing_and_missing_kernels(tmp_path: Path) -> None:
    req = ProfileRequest(
        source=CHEATS,
        language="torch",
        configs={"n": [4096]},
        variants=[
            Variant(name="run"),
            Variant(name="flaky", entry="flaky"),
            Variant(name="cached", entry="cached"),
        ],
        runs=3,
        warmup=1,
    )
    pre = pipeline.preflight(req, runs_root=tmp_path, device="cuda")
    print(pre.model_dump_json(indent=1))  # shown by pytest -rA
    # Variants that fail alone are dropped with their verdicts; the run goes on without them.
    # A check failed (the cache, on varied inputs): the stage names it.
    assert not pre.ok and pre.stage == "check"
    assert pre.kernels_per_call is not None
    assert {len(k) for k in pre.kernels_per_call["run"]} == {1}
    assert {len(k) for k in pre.kernels_per_call["flaky"]} == {1, 2}
    assert {len(k) for k in pre.kernels_per_call["cached"]} == {0}
    assert any(
        "'flaky', config #0: the number of kernels changes between runs ([1, 2])" in e
        for e in pre.errors
    )
    # 'cached' computed in its first call and returns that result after: on inputs the
    # harness varies (setup ignores the seed) its values are wrong, the stronger truth.
    assert any("'cached', config #0: its first call launched 1 kernel(s)" in e for e in pre.errors)
    assert {k: v.verdict for k, v in pre.dropped.items()} == {
        "flaky": "suspect",
        "cached": "incorrect",
    }
    assert "its first call launched 1 kernel(s)" in pre.dropped["cached"].message
    pipeline.raise_if_broken(pre)  # does not raise: the baseline is fine
