"""annotate, analyze.kernel's argument handling, by-value shipping (nested functions, methods,
a notebook run headless) through a fake ncu, nsight-python's names and warnings, and the thermal
guard: no GPU needed."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

import nsight_agent
from nsight_agent import exceptions
from nsight_agent.annotation import CALL_STATE
from nsight_agent.api import analyze, compat
from nsight_agent.api.compat import VerbosityLevel
from nsight_agent.engine.thermal import ThermalGuard
from nsight_agent.errors import (
    CoolingTimeoutError,
    InvalidRequestError,
    NcuError,
    NcuNotFoundError,
    ProfiledProcessError,
    UnknownMetricError,
)
from nsight_agent.exceptions import ProfilerException
from tests.test_engine_shipping import write_fake_ncu


@pytest.fixture(autouse=True)
def fresh_call() -> None:
    CALL_STATE.reset()


def test_annotate_nested_is_refused() -> None:
    with (
        nsight_agent.annotate("outer"),
        pytest.raises(ValueError, match="Nested annotations are not supported"),
        nsight_agent.annotate("inner"),
    ):
        pass


def test_annotate_name_twice_in_one_run_is_refused() -> None:
    with nsight_agent.annotate("a"):
        pass
    with (
        pytest.raises(ValueError, match="Annotation name 'a' has already been used"),
        nsight_agent.annotate("a"),
    ):
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
    assert errors and "Nested annotations" in str(errors[0])


def test_annotate_rejects_empty_name() -> None:
    with pytest.raises(ValueError):
        nsight_agent.annotate("  ")


def f3(a: int, b: int = 2, c: str = "x") -> None: ...


def f1(n: int) -> None: ...


def test_configs_normalisation() -> None:
    assert analyze.normalize_configs(f1, [1, 2]) == [(1,), (2,)]
    assert analyze.normalize_configs(f3, [(1,), [5]]) == [(1, 2, "x"), (5, 2, "x")]
    assert analyze.normalize_configs(f3, [[5, 6], (7, 8)]) == [(5, 6, "x"), (7, 8, "x")]
    with pytest.raises(InvalidRequestError, match=r"f1 takes \(n\)"):
        analyze.normalize_configs(f1, [(1, 2)])
    with pytest.raises(InvalidRequestError, match="but function expects between 1 and 3"):
        analyze.normalize_configs(f3, [()])
    with pytest.raises(InvalidRequestError, match="empty"):
        analyze.normalize_configs(f1, [])


def test_configs_given_twice_or_not_at_all() -> None:
    twice = analyze.kernel(configs=[1])(f1)
    with pytest.raises(InvalidRequestError, match="at decoration time and at runtime"):
        twice(configs=[2])
    never = analyze.kernel(f1)
    with pytest.raises(InvalidRequestError, match="You have provided no configs"):
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


PREFETCH_PROBE = """
import sys, time
from nsight_agent.api import analyze
assert "nsight_agent.views.plot" not in sys.modules

seen = []

def profiled():  # stands in for the profile call, which waits on ncu
    deadline = time.monotonic() + 20
    while "matplotlib.figure" not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.01)
    seen.append("matplotlib.figure" in sys.modules)  # during the call, not after it

try:
    analyze.plot("x.png")(profiled)()
except Exception as err:  # not ProfileResults: refused after the call
    print(type(err).__name__, *seen)
"""


def test_a_plotted_call_imports_matplotlib_while_the_profile_call_waits() -> None:
    """The plot's imports overlap the profile call (the nsight-python examples' parent)."""
    done = subprocess.run(
        [sys.executable, "-c", PREFETCH_PROBE], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["InvalidRequestError", "True"]


READERS_PROBE = """
import sys, time
import nsight_agent
from nsight_agent.engine.collection import ncu

@nsight_agent.analyze.kernel(configs=[(1,)], verbosity="quiet")
def f(n):
    pass

# What the profiled child loads too: its script decorates the same function.
print("probe: decorated", *(m in sys.modules for m in ("pandas", "ncu_report", "pydantic")))
seen = []

def waits_on_ncu(argv, invocation, env=None):  # stands in for ncu's run
    deadline = time.monotonic() + 20
    while "ncu_report" not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.01)
    seen.append("pandas" in sys.modules and "ncu_report" in sys.modules)
    raise RuntimeError("stop")

ncu.profile_cold = waits_on_ncu
try:
    f()
except RuntimeError:
    print("probe: during the call", *seen)
"""


def test_the_report_readers_load_during_the_profile_call_not_with_the_decorator(
    tmp_path: Path,
) -> None:
    """pandas and ncu_report (about 0.3 s) stay out of the decorating import, which the
    profiled child pays under ncu, and load in the caller while ncu runs; pydantic (0.1-0.2 s,
    the server's requests) is not loaded at all."""
    script = tmp_path / "probe.py"
    script.write_text(READERS_PROBE)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith("probe: ")]
    assert said == ["probe: decorated False False False", "probe: during the call True"]


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


# --- by-value shipping through analyze.kernel (a fake ncu runs the real child; no report) -----


@pytest.fixture
def fake_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = write_fake_ncu(tmp_path)
    monkeypatch.setenv("NCU", str(script))
    return script


def test_a_nested_decorated_function_runs_in_the_child(
    tmp_path: Path, fake_ncu: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scale = 3

    @analyze.kernel(configs=[(1,), (2,)], output_prefix=f"{tmp_path}/out/")
    def nested(n: int) -> None:
        (tmp_path / f"called-{n}").write_text(str(n * scale))

    # The fake ncu writes no report: the profile fails after the child ran every config.
    with pytest.raises(NcuError, match="no report"):
        nested()
    assert [(tmp_path / f"called-{n}").read_text() for n in (1, 2)] == ["3", "6"]
    assert "[nsight-agent] profiling nested: 2 config(s)" in capsys.readouterr().out


def test_the_users_traceback_comes_back_with_file_and_line(tmp_path: Path, fake_ncu: Path) -> None:
    @analyze.kernel(configs=[(5,)], output_prefix=f"{tmp_path}/", verbosity=VerbosityLevel.SILENT)
    def broken(n: int) -> None:
        raise ZeroDivisionError(f"broken at {n}")

    with pytest.raises(ProfiledProcessError) as err:
        broken()
    message = str(err.value)
    line = broken.func.__code__.co_firstlineno + 2
    assert f'File "{__file__}", line {line}, in broken' in message
    assert "ZeroDivisionError: broken at 5" in message and "config #0 (5,)" in message


class Model:
    def __init__(self, out: Path) -> None:
        self.out = out

    @analyze.kernel(configs=[(4,)], verbosity="quiet")
    def forward(self, n: int) -> None:
        self.out.write_text(f"forward {n}")


def test_a_decorated_method_is_profiled_bound_to_its_instance(
    tmp_path: Path, fake_ncu: Path
) -> None:
    model = Model(tmp_path / "out.txt")
    assert analyze.param_names(model.forward.func) == ["n"]
    with pytest.raises(NcuError, match="no report"):
        model.forward()
    assert (tmp_path / "out.txt").read_text() == "forward 4"


def test_an_unpicklable_closure_is_named_before_ncu_starts(fake_ncu: Path) -> None:
    lock = threading.Lock()

    @analyze.kernel(configs=[(1,)])
    def locked(n: int) -> None:
        with lock:
            pass

    with pytest.raises(ProfilerException, match="closure variable 'lock'"):
        locked()


# --- nsight-python's surface ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (VerbosityLevel.SILENT, "quiet"),
        (VerbosityLevel.INFO, "progress"),
        (VerbosityLevel.DEBUG, "verbose"),
        ("verbose", "verbose"),
    ],
)
def test_verbosity_level_maps_to_our_strings(level: object, expected: str) -> None:
    profiled = analyze.kernel(verbosity=level)(f1)  # type: ignore[call-overload]
    assert profiled.settings.verbosity == expected


def test_exceptions_module_has_nsight_pythons_names() -> None:
    assert issubclass(InvalidRequestError, exceptions.ProfilerException)
    assert exceptions.NCUNotAvailableError is NcuNotFoundError
    assert issubclass(exceptions.CoolingTimeoutError, exceptions.ThermalControlError)
    assert nsight_agent.VerbosityLevel is VerbosityLevel
    assert nsight_agent.row_panel and nsight_agent.col_panel


def test_config_errors_carry_nsight_pythons_phrases() -> None:
    with pytest.raises(exceptions.ProfilerException, match="function expects 1"):
        analyze.normalize_configs(f1, [(1, 2)])
    with pytest.raises(exceptions.ProfilerException, match="between 1 and 3"):
        analyze.normalize_configs(f3, [()])


def test_derived_metric_without_unit_warns_as_nsight_python_does() -> None:
    def custom(t: float, n: int) -> float:
        return t * n

    derived = compat.with_unit_warnings(custom)
    assert derived.__name__ == "custom"
    with pytest.warns(UserWarning, match="Derived metric 'custom' does not have a unit specified"):
        value, unit = derived(2.0, 3)
    assert value == 6.0 and math.isnan(unit)
    as_dict = compat.with_unit_warnings(lambda t: {"a": t, "b": (t, "ns")})
    with pytest.warns(UserWarning, match="Derived metric 'a'"):
        out = as_dict(1.0)
    assert out["b"] == (1.0, "ns") and math.isnan(out["a"][1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compat.with_unit_warnings(lambda t: (t, "x"))(1.0) == (1.0, "x")


def test_a_returned_value_warns_as_nsight_python_does() -> None:
    with pytest.warns(RuntimeWarning, match="returns a value, but the return value"):
        compat.warn_if_returned("f", {"calls": [{"returned": True}]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compat.warn_if_returned("f", {"calls": [{"returned": False}]})


# --- a notebook executed headless: the cell's function profiles, the notebook is not re-run ---

NOTEBOOK_CELLS = [
    """\
import os
from pathlib import Path
import nsight_agent as nsight
out = Path(os.environ["NB_OUT"])
with (out / "executions.txt").open("a") as f:
    f.write("notebook ran\\n")
""",
    """\
def make(scale):
    @nsight.analyze.kernel(configs=[(1,), (2,)], output_prefix=str(out) + "/")
    def in_a_cell(n):
        (out / f"called-{n}").write_text(str(n * scale))
    return in_a_cell

try:
    make(10)()
except nsight.errors.NcuError as err:
    print("NCU-ERROR", type(err).__name__)
""",
    """\
@nsight.analyze.kernel(configs=[(7,)], verbosity=nsight.VerbosityLevel.SILENT)
def fails_in_a_cell(n):
    raise ValueError(f"cell failure {n}")

try:
    fails_in_a_cell()
except nsight.exceptions.ProfilerException as err:
    print("PROFILED-ERROR", err)
""",
]


def test_a_notebook_cell_function_profiles_without_re_running_the_notebook(
    tmp_path: Path, fake_ncu: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("NB_OUT", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in NOTEBOOK_CELLS])
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3").execute(cwd=str(tmp_path))
    texts = [
        "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stdout")
        for cell in nb.cells
    ]
    assert "[nsight-agent] profiling in_a_cell: 2 config(s)" in texts[1]  # progress in the cell
    assert "NCU-ERROR NcuError" in texts[1]
    assert [(tmp_path / f"called-{n}").read_text() for n in (1, 2)] == ["10", "20"]
    assert "ValueError: cell failure 7" in texts[2]
    assert 'raise ValueError(f"cell failure {n}")' in texts[2]  # the cell's own line
    assert (tmp_path / "executions.txt").read_text() == "notebook ran\n"  # not re-run


def test_plot_metric_choice_uses_nsight_pythons_messages() -> None:
    with pytest.raises(ValueError, match=r"Cannot visualize multiple metrics \(2 > 1\)"):
        compat.check_plot_metric(["a", "b"], None)
    with pytest.raises(ValueError, match=r"Metric 'c' not found in the profile results\."):
        compat.check_plot_metric(["a", "b"], "c")
    compat.check_plot_metric(["a"], None)


GPU_NOTEBOOK_CELLS = [
    """\
import torch
import nsight_agent as nsight
scale = 3.0  # a global of the notebook, read by the profiled function
""",
    """\
def make(offset):
    @nsight.analyze.kernel(configs=[(1 << 20,), (1 << 24,)], runs=3)
    def scaled_in_a_cell(n):
        x = torch.randn(n, device="cuda")
        with nsight.annotate("scale"):
            y = x * (scale + offset)  # one kernel; a global and a closure cell
    return scaled_in_a_cell

df = make(1.0)().to_dataframe()
print("ROWS", len(df), "KERNELS", sorted(set(df["Kernel"])))
print("AVG", [float(v) for v in df["AvgValue"]])
""",
    """\
@nsight.analyze.kernel(configs=[(5,)], verbosity=nsight.VerbosityLevel.SILENT)
def fails_on_the_gpu(n):
    x = torch.ones(n, device="cuda")
    raise ValueError(f"cell failure {n} on {x.device.type}")

try:
    fails_on_the_gpu()
except nsight.exceptions.ProfilerException as err:
    print("PROFILED-ERROR", err)
""",
]


@pytest.mark.gpu
def test_a_notebook_cell_function_profiles_on_the_gpu(tmp_path: Path) -> None:
    """A Jupyter kernel, headless: a nested function over notebook globals, under real ncu."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in GPU_NOTEBOOK_CELLS])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute(cwd=str(tmp_path))
    texts = [
        "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stdout")
        for cell in nb.cells
    ]
    assert "[nsight-agent] profiling scaled_in_a_cell: 2 config(s)" in texts[1]
    assert "ROWS 2 KERNELS" in texts[1]
    averages = [float(v) for v in texts[1].split("AVG [", 1)[1].split("]", 1)[0].split(",")]
    assert len(averages) == 2 and 0 < averages[0] < averages[1]  # 16x the data takes longer
    assert "ValueError: cell failure 5 on cuda" in texts[2]
    assert 'raise ValueError(f"cell failure {n} on {x.device.type}")' in texts[2]


def test_the_child_stamps_where_a_profile_calls_wall_goes(tmp_path: Path) -> None:
    """The real child writes its stamps into the manifest; the caller's split reads them into
    five stages that add up to the whole call, and says nothing where a stamp is missing."""
    from nsight_agent.api.analyze import stage_split
    from tests.test_engine_shipping import run_shipped

    spawned = time.time()
    code, manifest, error = run_shipped(tmp_path, lambda n: sum(range(n)), [(10,), (20,)], runs=2)
    assert code == 0, error
    times = manifest["times"]
    assert spawned <= times["entered"] <= times["loaded"] <= times["calls_done"] <= time.time()
    done = time.time()
    split = stage_split(spawned, times, done, done + 0.5)
    assert list(split) == [
        "ncu and python start",
        "imports",
        "calls and replay",
        "report written",
        "report read",
    ]
    assert split["report read"] == 0.5
    assert sum(split.values()) == pytest.approx(done + 0.5 - spawned, abs=0.01)
    assert stage_split(spawned, {**times, "loaded": None}, done, done) == {}
    assert stage_split(spawned, None, done, done) == {}
    # a stamp out of order (a clock stepped back) is no split rather than a negative stage
    assert stage_split(times["calls_done"] + 1, times, done + 2, done + 3) == {}


@pytest.mark.parametrize(
    ("replay", "set_by_user", "child_gets"),
    [
        ("kernel", None, "warmup"),
        ("application", None, "init"),
        ("range", None, "init"),
        ("kernel", "off", None),  # the caller's own setting reaches the child as it is
    ],
)
def test_the_child_warms_ncu_up_under_kernel_replay_only(
    monkeypatch: pytest.MonkeyPatch, replay: str, set_by_user: str | None, child_gets: str | None
) -> None:
    from nsight_agent.engine.worker import cuda_early

    if set_by_user is None:
        monkeypatch.delenv(cuda_early.ENV, raising=False)
    else:
        monkeypatch.setenv(cuda_early.ENV, set_by_user)
    got = analyze.early_cuda(replay)  # type: ignore[arg-type]
    assert got == ({} if child_gets is None else {cuda_early.ENV: child_gets})


def test_a_misspelt_metric_is_said_before_ncu_is_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As on the server and the command line: the certain problem first, not "ncu was not
    found" on a machine without it."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NSIGHT_AGENT_NCU", raising=False)

    @analyze.kernel(configs=[(64,)], metrics=["dram__bytes_reed.sum"], verbosity="quiet")
    def sweep(n: int) -> None: ...

    with pytest.raises(UnknownMetricError, match=r"dram__bytes_read\.sum"):
        sweep()


@pytest.mark.parametrize("timeout", [-1, 0, 5])
def test_a_timeout_below_every_front_ends_floor_is_refused_when_decorating(timeout: float) -> None:
    with pytest.raises(InvalidRequestError, match="timeout must be >= 10 s"):
        analyze.kernel(configs=[(64,)], timeout=timeout)(lambda n: None)
