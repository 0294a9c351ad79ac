"""The typed records of a run (engine/store/records.py): dropped variants and suspects are
stored in the bytes their plain producers wrote, and read back equal."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

from nsight_agent.engine import pipeline
from nsight_agent.engine.harness import runtime
from nsight_agent.engine.store.records import (
    DroppedVariant,
    Suspect,
    dropped_from,
    suspects_from,
)
from nsight_agent.request import ProfileRequest


def _raised_drop() -> dict[str, object]:
    """What the harness's ``runtime.Dropped`` records for a variant whose entry raised."""
    dropped = runtime.Dropped("base")
    with dropped.isolate("boom", "entry", 1):
        raise RuntimeError("boom")
    return dict(dropped["boom"])


def test_a_raised_variant_keeps_its_null_location_keys_in_order() -> None:
    plain = _raised_drop()
    assert plain["line"] is None and plain["file"] is None  # raised outside a user file
    record = dropped_from({"boom": plain})["boom"]
    assert (record.verdict, record.stage, record.config_index) == ("error", "entry", 1)
    assert json.dumps(record.model_dump()) == json.dumps(plain)


def test_a_check_drop_has_only_the_keys_it_was_given() -> None:
    record = DroppedVariant(
        verdict="incorrect", stage="check", message="dtype differs", config_index=0, reason="dtype"
    )
    assert list(record.model_dump()) == ["verdict", "stage", "message", "config_index", "reason"]
    assert record.status_entry() == {
        "verdict": "incorrect",
        "stage": "check",
        "message": "dtype differs",
    }
    assert DroppedVariant(verdict="suspect", stage="profile", message="").status_entry() == {
        "verdict": "suspect",
        "stage": "profile",
    }


def test_a_verdict_outside_the_four_is_refused() -> None:
    with pytest.raises(ValidationError):
        DroppedVariant.model_validate({"verdict": "faster", "stage": "entry", "message": "m"})


def test_records_survive_result_json_byte_for_byte(tmp_path: Path) -> None:
    run_dir = tmp_path / "20260101-000000-abcdef"
    run_dir.mkdir()
    request = ProfileRequest(source="def setup(n, device):\n    return ()\n", configs=[{"n": 1}])
    (run_dir / "request.json").write_text(request.model_dump_json())
    plain_dropped = {
        "boom": _raised_drop(),
        "flat": {"verdict": "suspect", "stage": "profile", "message": "uneven kernels"},
    }
    plain_suspects = [{"variant": "cheat", "config_index": 0, "reason": "below the floor"}]
    pre = pipeline.PreflightResult(
        ok=True, device="cpu", seconds=0.5, dropped=dropped_from({"boom": plain_dropped["boom"]})
    )
    frame = pd.DataFrame({"Annotation": ["run"], "n": [1], "AvgValue": [1.5]})
    result = pipeline.RunResult(
        run_id=run_dir.name,
        run_dir=run_dir,
        request=request,
        processed=frame,
        raw=frame,
        checks=[],
        kernels={"run": []},
        warnings=[],
        artifacts={},
        seconds=1.0,
        preflight=pre,
        dropped=dropped_from(plain_dropped),
        suspects=suspects_from(plain_suspects),
    )
    pipeline.save_result(result)
    first = (run_dir / "result.json").read_text()
    stored = json.loads(first)
    assert stored["dropped"] == plain_dropped and stored["suspects"] == plain_suspects
    assert stored["preflight"]["dropped"] == {"boom": plain_dropped["boom"]}

    loaded = pipeline.load_run(run_dir.name, runs_root=tmp_path)
    assert loaded.dropped == result.dropped and loaded.suspects == result.suspects
    assert loaded.suspects == [Suspect(variant="cheat", config_index=0, reason="below the floor")]
    pipeline.save_result(loaded)
    assert (run_dir / "result.json").read_text() == first
    again = pipeline.PreflightResult.model_validate_json(pre.model_dump_json(indent=1))
    assert again.model_dump_json(indent=1) == pre.model_dump_json(indent=1)
