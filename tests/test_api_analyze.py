"""annotate, analyze.kernel's argument handling and the thermal guard: no GPU needed."""

from __future__ import annotations

import threading

import pytest

import nsight_agent
from nsight_agent.annotation import CALL_STATE
from nsight_agent.api import analyze
from nsight_agent.engine.thermal import ThermalGuard
from nsight_agent.errors import CoolingTimeoutError, InvalidRequestError


@pytest.fixture(autouse=True)
def fresh_call() -> None:
    CALL_STATE.reset()


def test_annotate_nested_is_refused() -> None:
    with (
        nsight_agent.annotate("outer"),
        pytest.raises(ValueError, match="nested"),
        nsight_agent.annotate("inner"),
    ):
        pass


def test_annotate_name_twice_in_one_run_is_refused() -> None:
    with nsight_agent.annotate("a"):
        pass
    with pytest.raises(ValueError, match="used twice"), nsight_agent.annotate("a"):
        pass
    CALL_STATE.reset()  # a new run may use the name again
    with nsight_agent.annotate("a"):
        pass


def test_annotate_as_decorator_and_ignore_failures() -> None:
    @nsight_agent.annotate("decorated")
    def f(x: int) -> int:
        return x + 1

    assert f(1) == 2
    assert CALL_STATE.opened == ["decorated"]
    with nsight_agent.annotate("flaky", ignore_failures=True):
        raise RuntimeError("swallowed")
    assert CALL_STATE.failed == ["flaky"]
    with pytest.raises(RuntimeError), nsight_agent.annotate("strict"):
        raise RuntimeError("not swallowed")


def test_annotate_from_another_thread_sees_the_same_state() -> None:
    errors: list[BaseException] = []
    with nsight_agent.annotate("main"):

        def other() -> None:
            try:
                with nsight_agent.annotate("other"):
                    pass
            except ValueError as err:
                errors.append(err)

        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert errors and "nested" in str(errors[0])


def test_annotate_rejects_empty_name() -> None:
    with pytest.raises(ValueError):
        nsight_agent.annotate("  ")


def f3(a: int, b: int = 2, c: str = "x") -> None: ...


def f1(n: int) -> None: ...


def test_configs_normalisation() -> None:
    assert analyze.normalize_configs(f1, [1, 2]) == [(1,), (2,)]
    assert analyze.normalize_configs(f3, [(1,), [5, 6], (7, 8, "y")]) == [
        (1, 2, "x"),
        (5, 6, "x"),
        (7, 8, "y"),
    ]
    with pytest.raises(InvalidRequestError, match="takes 1 parameters"):
        analyze.normalize_configs(f1, [(1, 2)])
    with pytest.raises(InvalidRequestError, match="no value for a"):
        analyze.normalize_configs(f3, [()])
    with pytest.raises(InvalidRequestError, match="empty"):
        analyze.normalize_configs(f1, [])


def test_configs_given_twice_or_not_at_all() -> None:
    twice = analyze.kernel(configs=[1])(f1)
    with pytest.raises(InvalidRequestError, match="both"):
        twice(configs=[2])
    never = analyze.kernel(f1)
    with pytest.raises(InvalidRequestError, match="No configs"):
        never()


@pytest.mark.parametrize(
    "bad",
    [
        {"replay_mode": "app"},
        {"cache_control": "flush"},
        {"clock_control": "max"},
        {"thermal_mode": "on"},
        {"verbosity": "loud"},
        {"runs": 0},
    ],
)
def test_literal_options_are_rechecked_at_runtime(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidRequestError):
        analyze.kernel(**bad)(f1)  # type: ignore[call-overload]


def test_plot_over_kernel_keeps_the_chain_to_the_users_function() -> None:
    profiled = analyze.kernel(configs=[1])(f1)
    plotted = analyze.plot("x.png")(profiled)
    assert plotted.func is profiled and profiled.func is f1
    assert plotted.__name__ == "f1" and plotted.__doc__ == f1.__doc__


def test_plot_must_wrap_a_profiled_function() -> None:
    plotted = analyze.plot("x.png")(lambda: 42)
    with pytest.raises(InvalidRequestError, match=r"above @analyze\.kernel"):
        plotted()


class FakeGpu:
    """Headroom that drops while running and recovers while sleeping."""

    def __init__(self, headroom: list[int]) -> None:
        self.values = headroom
        self.slept = 0.0

    def read(self) -> int:
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]

    def sleep(self, s: float) -> None:
        self.slept += s

    def clock(self) -> float:
        return self.slept


def test_thermal_guard_waits_until_headroom_recovers() -> None:
    gpu = FakeGpu([30, 9, 12, 15, 21])
    guard = ThermalGuard("manual", 10, 20, 60, gpu.read, gpu.sleep, gpu.clock)
    guard.before_call()  # 30: cool enough
    assert gpu.slept == 0
    guard.before_call()  # 9: pause until >= 20
    assert guard.pauses == 1 and gpu.slept == pytest.approx(1.5)


def test_thermal_guard_times_out_in_manual_mode() -> None:
    gpu = FakeGpu([5])
    guard = ThermalGuard("manual", 10, 20, 3, gpu.read, gpu.sleep, gpu.clock)
    with pytest.raises(CoolingTimeoutError, match="thermal_timeout"):
        guard.before_call()


def test_thermal_guard_off_reads_nothing() -> None:
    gpu = FakeGpu([0])
    ThermalGuard("off", read_headroom=gpu.read, sleep=gpu.sleep).before_call()
    assert gpu.slept == 0


def test_thermal_thresholds_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="larger than thermal_wait"):
        ThermalGuard("manual", 20, 10)
