"""Stand-ins for what ``ncu_report`` hands the diagnosis of one kernel, for tests that need a
report no GPU recorded (a kernel without line info, a header's inlined code)."""

from __future__ import annotations


class StandInMetric:
    """A per-instruction metric: its values, and the SASS addresses they belong to (None: a
    metric without correlation ids)."""

    def __init__(self, values: list[float], ids: list[int] | None) -> None:
        self.values, self.ids = values, ids

    def num_instances(self) -> int:
        return len(self.values)

    def as_double(self, i: int = 0) -> float:
        return self.values[i]

    def as_uint64(self, i: int = 0) -> int:
        return int(self.values[i])

    def has_correlation_ids(self) -> bool:
        return self.ids is not None

    def correlation_ids(self) -> StandInMetric | None:
        return None if self.ids is None else StandInMetric([float(i) for i in self.ids], None)
