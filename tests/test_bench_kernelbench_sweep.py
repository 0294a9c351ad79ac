"""bench/kernelbench_sweep.py on the CPU: the timing phase end to end over a fake KernelBench
checkout (one problem that runs, one whose get_inputs raises), the budget, the compile
candidate, and the summary's speedup agreement."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from bench import kernelbench_sweep as sweep
from nsight_agent.options import MIN_TIMEOUT_S

# A small KernelBench-style problem (the fixture the KernelBench tests use too).
TINY = (Path(__file__).parent / "fixtures" / "kernelbench" / "problem_linear_relu.py").read_text()

BROKEN = TINY.replace(
    "def get_inputs():\n", "def get_inputs():\n    raise ValueError('no inputs today')\n"
)


def fake_kb(root: Path) -> Path:
    level1 = root / "KernelBench" / "level1"
    level1.mkdir(parents=True)
    (level1 / "1_Tiny.py").write_text(TINY)
    (level1 / "2_Broken.py").write_text(BROKEN)
    (root / "COMMIT").write_text("0123456789abcdef\n")
    return root


def read(out: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((out / sweep.JSON_NAME).read_text())
    return result


def test_timing_phase_records_a_time_and_a_cause(tmp_path: Path) -> None:
    kb, out = fake_kb(tmp_path / "kb"), tmp_path / "out"
    argv = ["--kb", str(kb), "--out", str(out), "--phase", "timing", "--levels", "1"]
    assert sweep.main([*argv, "--runs-root", str(tmp_path / "runs")]) == 0
    data = read(out)
    rows = {r["file"]: r for r in data["rows"]}
    assert rows.keys() == {"1_Tiny.py", "2_Broken.py"}
    ok, broken = rows["1_Tiny.py"], rows["2_Broken.py"]
    assert ok["status"] == "ok" and ok["cause"] is None, ok
    assert ok["time_ns"] > 0 and ok["run_id"] and ok["seconds"] > 0
    assert ok["runs"] >= 5  # NumRuns of the reference
    assert {"pre-flight", "timing"} <= ok["stage_seconds"].keys(), ok["stage_seconds"]
    assert sum(ok["stage_seconds"].values()) <= ok["seconds"]
    assert broken["status"] == "failed"
    assert broken["cause"].startswith("SourceError: setup failed"), broken
    assert "ValueError: no inputs today" in broken["cause"]
    assert "render" in broken["stage_seconds"], broken  # the stages before the failure
    timing = data["summary"]["timing"]
    assert (timing["ran"], timing["ok"], timing["failed"], timing["not_run"]) == (2, 1, 1, 0)
    assert timing["ok_pct"] == 50.0
    assert timing["causes"] == [
        {
            "cause": "SourceError: setup failed: ValueError",
            "count": 1,
            "problems": ["L1/2_Broken.py"],
        }
    ]
    assert data["meta"]["kb_commit"] == "0123456789ab"
    table = (out / sweep.MD_NAME).read_text()
    assert "| timing | 1 | 2 | 2 | 1 | 1 | 0 | 50 % |" in table
    assert "| timing | SourceError: setup failed: ValueError | 1 | L1/2_Broken.py |" in table

    # a spent budget starts nothing, and a later call's not-run rows keep the rows that ran
    assert sweep.main([*argv, "--budget-s", "0", "--runs-root", str(tmp_path / "runs")]) == 0
    again = read(out)
    assert [r["status"] for r in again["rows"]] == ["ok", "failed"]
    fresh = tmp_path / "fresh"
    assert sweep.main([*argv[:2], "--out", str(fresh), "--phase", "timing", "--budget-s", "0"]) == 0
    assert [(r["status"], r["cause"]) for r in read(fresh)["rows"]] == [
        ("not_run", sweep.NOT_RUN),
        ("not_run", sweep.NOT_RUN),
    ]


def test_the_compile_candidate_compiles_the_reference_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compiled: list[torch.nn.Module] = []

    def fake_compile(model: torch.nn.Module, **_: Any) -> torch.nn.Module:
        compiled.append(model)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    namespace: dict[str, Any] = {}
    exec(compile(sweep.compiled_candidate(TINY), "candidate", "exec"), namespace)
    torch.manual_seed(3)
    ref = namespace["Model"](*namespace["get_init_inputs"]())
    torch.manual_seed(3)
    new = namespace["ModelNew"](*namespace["get_init_inputs"]())
    assert len(compiled) == 1 and type(compiled[0]) is namespace["Model"]
    x = torch.randn(*namespace["get_inputs"]()[0].shape)
    assert torch.equal(new(x), ref(x))  # same seed, same weights: the harness's convention


def test_speedup_agreement_counts_only_ok_rows_and_splits_honest_ones() -> None:
    def row(i: int, status: str, ratio: float | None, honest: bool) -> dict[str, Any]:
        return {
            "phase": "compile", "index": i, "level": 1, "file": f"{i}_p.py", "status": status,
            "cause": None if status == "ok" else "Failed: x", "seconds": 1.0,
            "ratio": ratio, "honest": honest,
        }  # fmt: skip

    rows = [
        row(0, "ok", 1.02, True),
        row(1, "ok", 0.90, True),
        row(2, "ok", 1.30, False),
        row(3, "failed", None, False),
    ]
    s = sweep.phase_summary("compile", rows)
    assert (s["ran"], s["ok"], s["failed"]) == (4, 3, 1)
    assert s["agreement"] == {
        "n": 3,
        "median_abs_dev_pct": 10.0,
        "max_abs_dev_pct": 30.0,
        "within_5pct": 1,
        "within_5pct_share": 0.333,
    }
    assert s["agreement_honest"]["n"] == 2 and s["agreement_honest"]["within_5pct"] == 1


def test_a_big_kernel_without_a_cause_is_counted_unless_a_step_cause_names_it() -> None:
    from nsight_agent.service.diagnose import diagnose_file
    from tests.fixture_reports import unpacked

    # step_chain: the user's gather (32 %) has no cause; the torch ops after it are an
    # unfused chain, a step cause that names their groups.
    chain = Path(__file__).parent / "fixtures" / "steps" / "step_chain.ncu-rep.xz"
    d = diagnose_file(unpacked(chain), limit=sweep.DIAGNOSED)
    found = sweep.diagnosis_fields(d) | sweep.step_fields(d)
    silent = [k["kernel"] for k in found["uncaused"] if not k["step_cause"]]
    assert silent == ["user_col_gather"] and found["no_cause_count"] == 1
    assert len(found["uncaused"]) > 1  # the chain's kernels: no cause of their own
    assert all(k["share_pct"] >= sweep.SHARE_PCT for k in found["uncaused"])
    assert found["step_causes"] == ["unfused_chain"] and found["top_group"] == "user_col_gather"
    assert found["sampled"] is None  # every launch profiled


@pytest.mark.parametrize("name", ["step_chain", "step_layer_ho", "step_tiny", "step_chain_ho2"])
def test_a_kernel_counts_as_covered_by_a_step_cause_exactly_when_its_headline_says_so(
    name: str,
) -> None:
    # A ResNet18 kernel whose headline names the step's launch_bound_step (H200) has a cause:
    # the count asks the step cause as the view does.
    from nsight_agent.service.diagnose import diagnose_file
    from tests.fixture_reports import unpacked

    report = Path(__file__).parent / "fixtures" / "steps" / f"{name}.ncu-rep.xz"
    found = sweep.diagnosis_fields(diagnose_file(unpacked(report), limit=sweep.DIAGNOSED))
    for k in found["uncaused"]:
        assert k["step_cause"] == ("part of the step's" in k["headline"]), k
    assert found["no_cause_count"] == sum(not k["step_cause"] for k in found["uncaused"])


def test_a_limit_cut_by_the_budget_is_named_in_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = tmp_path / "kb"
    (kb / "KernelBench" / "level2").mkdir(parents=True)
    slow = TINY.replace("def get_inputs():\n", "def get_inputs():\n    time.sleep(60)\n")
    (kb / "KernelBench" / "level2" / "1_Slow.py").write_text("import time\n" + slow)
    monkeypatch.setattr(sweep, "MIN_TIMEOUT_S", float(MIN_TIMEOUT_S))  # a request's floor
    out = tmp_path / "out"
    argv = ["--kb", str(kb), "--out", str(out), "--phase", "timing", "--budget-s", "20"]
    assert sweep.main([*argv, "--runs-root", str(tmp_path / "runs")]) == 0
    (row,) = read(out)["rows"]
    assert row["status"] == "failed" and row["cause"].startswith("budget-limited: "), row
    assert row["seconds"] < 40  # not the 60 s sleep: the cut limit (10 s) ended it


def test_files_runs_only_the_named_problems_in_their_places(tmp_path: Path) -> None:
    kb, out = fake_kb(tmp_path / "kb"), tmp_path / "out"
    argv = ["--kb", str(kb), "--out", str(out), "--phase", "timing", "--levels", "1"]
    assert sweep.main([*argv, "--files", "2_Broken.py", "--runs-root", str(tmp_path / "r")]) == 0
    (row,) = read(out)["rows"]
    assert (row["file"], row["index"], row["status"]) == ("2_Broken.py", 1, "failed")


def test_two_shards_split_a_phase_and_merge_back_whole(tmp_path: Path) -> None:
    kb = fake_kb(tmp_path / "kb")
    argv = ["--kb", str(kb), "--phase", "timing", "--levels", "1"]
    for k in (0, 1):
        out = tmp_path / f"shard{k}"
        runs = str(tmp_path / f"r{k}")
        assert sweep.main([*argv, "--out", str(out), "--shard", f"{k}/2", "--runs-root", runs]) == 0
    assert [r["file"] for r in read(tmp_path / "shard0")["rows"]] == ["1_Tiny.py"]
    assert [r["file"] for r in read(tmp_path / "shard1")["rows"]] == ["2_Broken.py"]
    parts = [str(tmp_path / f"shard{k}" / sweep.JSON_NAME) for k in (0, 1)]
    assert sweep.main(["--out", str(tmp_path / "all"), "--merge", *parts]) == 0
    merged = read(tmp_path / "all")
    assert [(r["file"], r["status"]) for r in merged["rows"]] == [
        ("1_Tiny.py", "ok"),
        ("2_Broken.py", "failed"),
    ]
    # the merged JSON is committed: no folder of the machine that ran or merged it
    assert str(tmp_path) not in json.dumps(merged["meta"])
    assert merged["meta"]["merged"] == [f"shard{k}/{sweep.JSON_NAME}" for k in (0, 1)]
    with pytest.raises(SystemExit):
        sweep.parse(["--shard", "2/2"])


def test_the_source_fingerprint_names_the_code_that_ran(tmp_path: Path) -> None:
    # The device's git copy named 1d6d7eb for a later tree: the rows now also carry a hash of
    # the files themselves, equal for an equal tree, changed by any source or template edit.
    import shutil

    for part in ("nsight_agent", "templates"):
        shutil.copytree(sweep.ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("*.pyc"))
    assert sweep.source_fingerprint(tmp_path) == sweep.source_fingerprint()
    (tmp_path / "nsight_agent" / "engine" / "__pycache__").mkdir(exist_ok=True)
    (tmp_path / "nsight_agent" / "engine" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"x")
    assert sweep.source_fingerprint(tmp_path) == sweep.source_fingerprint()  # bytecode: no
    template = next((tmp_path / "templates").glob("*.j2"))
    template.write_text(template.read_text() + "\n")
    assert sweep.source_fingerprint(tmp_path) != sweep.source_fingerprint()
