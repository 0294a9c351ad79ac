"""nsight-python's messages, first in ours, for the same conditions: its parameter-validation
scenarios (tests/test_api_params.py of NVIDIA/nsight-python at 8736723) and the phrases its
profiler and annotation tests match, checked on the CPU (no ncu: the config errors come before
it, the extraction errors from hand-made kernel records)."""

from __future__ import annotations

import re
from typing import Any

import pytest

import nsight_agent as nsight
from nsight_agent import exceptions
from nsight_agent.annotation import CALL_STATE
from nsight_agent.api import compat
from nsight_agent.engine.collection import extract
from nsight_agent.errors import (
    InvalidRequestError,
    KernelCountMismatchError,
    MultipleKernelsError,
    UnknownMetricError,
)

SIZES = [(2**i,) for i in range(10, 13)]
# nsight-python's TEST_SCENARIOS (config validation), with its expected messages verbatim.
CONFIG_SCENARIOS: dict[str, dict[str, Any]] = {
    "no_configs": {
        "decorator_configs": None,
        "expected": "You have provided no configs. Provide configs at decoration time or at runtime.",
    },
    "empty_configs": {"decorator_configs": [], "expected": "configs cannot be empty"},
    "both_configs": {
        "runtime_configs": [(1024,), (2048,)],
        "expected": "You have provided configs at decoration time and at runtime. Provide configs at decoration time or at runtime.",
    },
    "mismatched_lengths": {
        "decorator_configs": [(1024,), (2048, 512), (4096,)],
        "expected": "All configs must have the same number of arguments. Found lengths: [1, 2, 1]",
    },
    "wrong_arg_count": {
        "decorator_configs": [(1024, 512), (2048, 1024)],
        "expected": "Configs have 2 arguments, but function expects 1",
    },
}  # fmt: skip


@pytest.fixture(autouse=True)
def fresh_call() -> None:
    CALL_STATE.reset()


@pytest.mark.parametrize("name", sorted(CONFIG_SCENARIOS))
def test_config_errors_start_with_nsight_pythons_sentence(name: str) -> None:
    scenario = CONFIG_SCENARIOS[name]
    kwargs: dict[str, Any] = {
        "runs": 1,
        "metrics": ["dram__bytes.sum.per_second"],
        "verbosity": nsight.VerbosityLevel.SILENT,
    }
    if "decorator_configs" not in scenario:
        kwargs["configs"] = SIZES
    elif scenario["decorator_configs"] is not None:
        kwargs["configs"] = scenario["decorator_configs"]

    @nsight.analyze.kernel(**kwargs)
    def run_benchmark(n: int) -> None:
        raise AssertionError("never runs: the configs are refused first")

    with pytest.raises(exceptions.ProfilerException) as err:
        if scenario.get("runtime_configs"):
            run_benchmark(configs=scenario["runtime_configs"])
        else:
            run_benchmark()
    message = str(err.value)
    assert re.search(re.escape(scenario["expected"]), message, re.IGNORECASE), message
    assert message.startswith(scenario["expected"])  # first, our hint after
    assert isinstance(err.value, ValueError) and "\nHint: " in message


def test_config_rules_are_nsight_pythons() -> None:
    def two(x: int, y: int = 3, *, z: str = "z") -> None: ...

    def none() -> None: ...

    def defaults(a: int = 1) -> None: ...

    from nsight_agent.api import configs

    assert configs.choose(none, (), {}, None, None) == [()]
    assert configs.choose(defaults, (), {}, None, None) == [()]  # no required parameter
    assert configs.normalize(two, [(1,), (2,)]) == [(1, 3, "z"), (2, 3, "z")]
    with pytest.raises(InvalidRequestError, match=r"Found lengths: \[2, 1, 2\]"):
        configs.normalize(defaults, [(100, 200), 200, (300, 400)])
    with pytest.raises(InvalidRequestError, match="function expects between 1 and 3"):
        configs.normalize(two, [(1, 2, "a", 4)])
    with pytest.raises(InvalidRequestError, match="either configs or the arguments"):
        configs.choose(two, (1,), {}, [(1,)], None)
    assert configs.choose(two, (1,), {"y": 5}, None, None) == [(1, 5)]  # kwargs: accepted
    assert configs.normalize(defaults, iter(range(1, 4))) == [(1,), (2,), (3,)]


def _record(call: int, kernel: str) -> extract.ActionRecord:
    return extract.ActionRecord(
        index=0,
        kernel=kernel,
        annotation="a",
        call=call,
        values={"t": 1.0},
        units={"t": "ns"},
        gpu="GPU",
        compute_clock=1.0,
        memory_clock=1.0,
    )


def _calls(n: int) -> list[extract.Call]:
    return [extract.Call(i, i, 0, ["a"], []) for i in range(n)]


def test_kernel_counts_that_differ_between_configs_say_expect_same_number() -> None:
    """nsight-python's `inconsistent_kernel_counts`: one config launches one kernel, another two."""
    records = [_record(0, "gemm"), _record(1, "gemm"), _record(1, "add")]
    with pytest.raises(RuntimeError) as err:
        extract.group_kernels(records, _calls(2))
    assert isinstance(err.value, KernelCountMismatchError)
    assert str(err.value).startswith("Expect same number of kernels per run.")
    assert re.search("Expect same number of kernels per run", str(err.value), re.IGNORECASE)
    # with a way to combine them, configs may differ (a library picks kernels by size)
    grouped = extract.group_kernels(records, _calls(2), combine=lambda a, b: a + b)
    assert [rec.kernel for _, rec in grouped["a"] if rec] == ["gemm", "gemm + add"]


def test_kernel_counts_that_differ_between_runs_say_expect_same_number() -> None:
    calls = [extract.Call(0, 0, 0, ["a"], []), extract.Call(1, 0, 1, ["a"], [])]
    records = [_record(0, "k"), _record(1, "k"), _record(1, "k")]
    with pytest.raises(RuntimeError, match=r"^Expect same number of kernels per run\. "):
        extract.group_kernels(records, calls, combine=lambda a, b: a + b)


def test_several_kernels_in_one_annotation_say_more_than_one_kernel_is_launched() -> None:
    records = [_record(0, "gemm"), _record(0, "add")]
    with pytest.raises(RuntimeError) as err:
        extract.group_kernels(records, _calls(1))
    message = str(err.value)
    assert isinstance(err.value, MultipleKernelsError)
    assert re.search("More than one .* kernel is launched", message, re.IGNORECASE)
    assert re.search("More than one.*kernel.*launched within the a annotation", message)
    assert message.startswith("More than one (total=2) kernel is launched within the a annotation.")


def test_an_unknown_metric_starts_with_nsight_pythons_sentence() -> None:
    err = compat.as_metrics_error(
        UnknownMetricError("invalid_value", ["inst_executed"], "Unknown metric 'invalid_value'.")
    )
    assert isinstance(err, exceptions.ProfilerException)
    assert re.search(
        r"Invalid value \['invalid_value'\] for 'metrics' parameter for nsight.analyze.kernel()",
        str(err),
    )
    assert "Close matches: inst_executed" in str(err) and "--query-metrics" in str(err)
    assert compat.as_metrics_error(err) is err


def test_annotation_errors_start_with_nsight_pythons_sentences() -> None:
    with pytest.raises(ValueError) as nested, nsight.annotate("outer"), nsight.annotate("inner"):
        pass
    assert str(nested.value).startswith(
        "Nested annotations are not supported. Cannot enter annotation 'inner' while another "
        "annotation is active."
    )
    CALL_STATE.reset()
    with nsight.annotate("a"):
        pass
    with pytest.raises(ValueError) as twice, nsight.annotate("a"):
        pass
    assert str(twice.value).startswith(
        "Annotation name 'a' has already been used in this profiling run. Each annotation must "
        "have a unique name."
    )


def test_the_package_exports_nsight_pythons_names() -> None:
    for name in ("CollectionScope", "InfoCollector", "experimental", "VerbosityLevel"):
        assert name in nsight.__all__ and getattr(nsight, name) is not None
    assert nsight.experimental.CollectionScope is nsight.CollectionScope
    assert callable(nsight.experimental.collect)
