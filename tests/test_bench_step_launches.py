"""bench/probes/step_launches.py's reading of kineto's Chrome trace (its forward runs need a
GPU): kernels in start order with grid and block, counted by launch configuration."""

from __future__ import annotations

from bench.probes import step_launches as probe


def test_kernels_are_read_in_start_order_and_counted_by_configuration() -> None:
    trace = {
        "traceEvents": [
            {"cat": "kernel", "name": "gemm", "ts": 30.0, "args": {"grid": [4, 1, 1], "block": [128, 1, 1]}},
            {"cat": "cpu_op", "name": "aten::mm", "ts": 1.0, "args": {}},
            {"cat": "kernel", "name": "add", "ts": 10.0, "args": {"grid": [2, 1, 1], "block": [256, 1, 1]}},
            {"cat": "kernel", "name": "add", "ts": 20.0, "args": {"grid": [2, 1, 1], "block": [256, 1, 1]}},
            {"cat": "kernel", "name": "add", "ts": 40.0, "args": {"grid": [8, 1, 1], "block": [256, 1, 1]}},
        ]
    }  # fmt: skip
    kernels = probe.kernels_of_trace(trace)
    assert [k[0] for k in kernels] == ["add", "add", "gemm", "add"]
    found = probe.summarize(kernels)
    assert (found["launches"], found["kernel_names"], found["configs"]) == (4, 2, 3)
    assert found["most_repeated"][0] == ["add", [2, 1, 1], [256, 1, 1], 2]
