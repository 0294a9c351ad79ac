"""One stability rule on both paths, applied as stated, and no "nan" in answers.

The rule: a measurement is stable when its relative standard deviation is below
``STABLE_RSD_PCT`` (2 %), on the ncu path (``collection/aggregate.py``) and on the timing path
(``worker/timing_result.py``) alike; the answers state it (``Stat.stable``'s description, the warning)
and show the RSD beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from nsight_agent.engine import pipeline
from nsight_agent.engine.collection.aggregate import STABLE_RSD_PCT
from nsight_agent.engine.worker import timing_result
from nsight_agent.engine.worker.pool import WorkerPool
from nsight_agent.request import ProfileRequest
from nsight_agent.service.summaries import profile_summary
from nsight_agent.views.common import dump


def test_the_timing_path_applies_the_stated_rsd_rule() -> None:
    quiet = [100.0, 100.5, 99.6, 100.2, 99.9]
    noisy = [100.0, 140.0, 80.0, 120.0, 95.0]  # a tight median interval, a wide spread
    for samples in (quiet, noisy):
        row = timing_result.summarize(samples, ci_target_pct=1.5)
        assert row["StableMeasurement"] == (row["RelativeStdDevPct"] < STABLE_RSD_PCT)
    assert timing_result.summarize(quiet, 1.5)["StableMeasurement"] is True
    assert timing_result.summarize(noisy, 1.5)["StableMeasurement"] is False
    # A single sample has no spread: not stable, and no made-up RSD.
    one = timing_result.summarize([5.0], 1.5)
    assert one["StableMeasurement"] is False and pd.isna(one["RelativeStdDevPct"])


def test_a_timing_answer_has_no_nan_and_flags_match_their_rsd(tmp_path: Path) -> None:
    source = (
        "import torch\n\ndef setup(n, device='cpu'):\n    return (torch.randn(n, device=device),)\n"
        "\ndef run(x):\n    return x * 2\n"
    )
    req = ProfileRequest.model_validate(
        {"source": source, "language": "torch", "configs": {"n": [1024, 65536]}, "runs": 5}
    )
    with WorkerPool() as pool:
        run = pipeline.time_request(req, pool, runs_root=tmp_path)
    answer = dump(profile_summary(pipeline.load_run(run.run_id, runs_root=tmp_path)))
    text = json.dumps(answer)
    assert '"nan"' not in text and "NaN" not in text  # absent values are absent
    for result in answer["results"]:
        assert "kernel" not in result  # the timing path has no kernel names: left out
        for stat in result["stats"].values():
            print(f"timing row {result.get('config')}: {json.dumps(stat)}")
            assert stat["stable"] == (stat["rsd_pct"] < STABLE_RSD_PCT)


def test_a_failed_check_is_recorded_as_the_variants_failure_not_hidden(tmp_path: Path) -> None:
    """A pre-flight whose variant returns the wrong shape: the run's status says the variant
    failed at the check stage, never a plain "passed"."""
    source = (
        "import torch\n\ndef setup(n, device='cpu'):\n    return (torch.ones(n, device=device),)\n"
        "\ndef run(x):\n    return x * 2\n\ndef short(x):\n    return (x * 2)[:-1]\n"
    )
    req = ProfileRequest.model_validate(
        {
            "source": source,
            "language": "torch",
            "configs": {"n": [4]},
            "variants": [{"name": "a", "entry": "run"}, {"name": "b", "entry": "short"}],
        }
    )
    pre = pipeline.preflight(req, runs_root=tmp_path, device="cpu")
    assert pre.run_id is not None
    status = json.loads((tmp_path / pre.run_id / "status.json").read_text())
    print(
        f"a failed check: the answer says {pre.errors or pre.checks}; status.json {json.dumps(status)}"
    )
    failed = status["variants_failed"]["b"]
    assert failed["verdict"] == "incorrect" and failed["stage"] == "check"
    assert "shape" in failed["message"]
    assert "a" not in status["variants_failed"]
    assert status["message"] == "variants failed alone: b incorrect at check"
