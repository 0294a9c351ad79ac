"""bench/probes/launch_config_sampling.py's reading and arithmetic (its ncu runs need a GPU):
a recorded step report grouped by launch configuration, and the sampled run's estimate of
each kernel's time against the full run's."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.probes import launch_config_sampling as probe
from tests.fixture_reports import unpacked


def test_the_estimate_weights_each_sampled_launch_by_its_configurations_count() -> None:
    full = {("a", 1.0, 32.0): [1.0, 1.0, 1.0], ("b", 2.0, 32.0): [4.0], ("a", 8.0, 32.0): [5.0]}
    sampled = {("a", 1.0, 32.0): [2.0], ("a", 8.0, 32.0): [5.0]}  # b's configuration missing
    c = probe.compare(full, sampled)
    assert c["by_kernel"]["a"] == {"full_ns": 8.0, "estimate_ns": 11.0, "error": 3.0 / 8.0}
    assert c["by_kernel"]["b"]["estimate_ns"] == 0.0 and c["by_kernel"]["b"]["error"] == -1.0
    assert c["step_full_ns"] == 12.0 and c["step_estimate_ns"] == 11.0
    assert c["step_error"] == pytest.approx(-1.0 / 12.0)
    assert (c["worst_kernel"], c["worst_error"]) == ("b", -1.0)
    assert c["configs_missing_from_sampled"] == [["b", 2.0, 32.0]]


def test_a_recorded_step_groups_by_launch_configuration() -> None:
    report = unpacked(Path(__file__).parent / "fixtures" / "steps" / "step_chain.ncu-rep.xz")
    configs = probe.by_config(report)
    assert sum(len(d) for d in configs.values()) > len(configs) >= 2
    # One launch per configuration, as the sampled run would keep: exact where nothing repeats.
    first = {key: durations[:1] for key, durations in configs.items()}
    c = probe.compare(configs, first)
    for (name, _, _), durations in configs.items():
        assert durations and all(d > 0 for d in durations), name
    unrepeated = {k[0] for k in configs} - {k[0] for k, d in configs.items() if len(d) > 1}
    assert all(c["by_kernel"][name]["error"] == 0.0 for name in unrepeated)
    assert c["configs_full"] == c["configs_sampled"] == len(configs)


def test_the_sampled_run_asks_ncu_for_one_launch_per_configuration(tmp_path: Path) -> None:
    argv = probe.ncu_argv("ncu", tmp_path / "r", tmp_path / "s.py", tmp_path / "p.py", True)
    assert argv[argv.index("--filter-mode") + 1] == "per-launch-config"
    assert argv[argv.index("--launch-count") + 1] == "1"
    assert argv[argv.index("--nvtx-include") + 1] == "step/"
    full = probe.ncu_argv("ncu", tmp_path / "r", tmp_path / "s.py", tmp_path / "p.py", False)
    assert "--filter-mode" not in full and full[-2:] == [
        str(tmp_path / "s.py"),
        str(tmp_path / "p.py"),
    ]
