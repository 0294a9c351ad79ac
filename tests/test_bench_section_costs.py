"""bench/section_costs.py's arithmetic (the runs themselves need a GPU with ncu): seconds per
replay pass from the 5-call and 1-call runs of every section, and each section over the floor."""

from __future__ import annotations

from typing import Any

import pytest

from bench.section_costs import derived


def row(label: str, sections: list[str], calls: int, ncu_s: float, passes: int) -> dict[str, Any]:
    return {
        "label": label,
        "sections": sections,
        "calls": calls,
        "wall_s": ncu_s + 1.0,
        "ncu_s": ncu_s,
        "ncu_kernels": calls,
        "ncu_passes": passes,
    }


def test_seconds_per_pass_and_each_section_over_the_floor() -> None:
    rows = [
        row("floor", [], 1, 8.0, 1),
        row("floor", [], 5, 8.2, 5),
        row("one_pass", ["A", "B"], 1, 9.0, 40),
        row("one_pass", ["A", "B"], 5, 11.4, 200),  # 160 more passes, 2.4 s more
        row("section:A", ["A"], 1, 8.5, 12),
        row("section:B", ["B"], 1, 8.1, 3),
    ]
    d = derived(rows)
    assert d["s_per_kernel_pass"] == pytest.approx(0.015)
    assert d["floor_ncu_s"] == 8.0
    assert d["sections"] == {
        "A": {"passes": 12, "over_floor_s": 0.5},
        "B": {"passes": 3, "over_floor_s": 0.1},
    }


def test_a_run_cut_short_derives_what_it_has() -> None:
    assert derived([]) == {}
    assert derived([row("floor", [], 1, 8.0, 1)]) == {"floor_ncu_s": 8.0, "sections": {}}
