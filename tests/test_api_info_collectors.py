"""Information collectors (nsight-python's ``info_collectors=``, ``CollectionScope``,
``InfoCollector``, ``experimental.collect``) and tensor-valued configs, end to end on the CPU.

A stand-in ``ncu`` runs the real profiled process (collectors included) and then puts the
recorded H200 sweep report in place; the profiled function opens the same annotations over the
same configs and runs as that recording, so the manifest it writes matches the report.
"""

from __future__ import annotations

import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest

import nsight_agent as nsight
from nsight_agent.annotation import CALL_STATE
from nsight_agent.api import analyze
from nsight_agent.engine.collection import aggregate as aggregation
from nsight_agent.engine.collection import extract
from nsight_agent.engine.worker.info import Collected, Collectors, bind_args
from nsight_agent.errors import InvalidRequestError, UnknownMetricError
from nsight_agent.experimental import CollectionScope, InfoCollector, collect
from nsight_agent.experimental import info_collectors as collecting

SWEEP = Path(__file__).parent / "fixtures" / "engine" / "sweep"
SIZES = [(4096,), (65536,), (1048576,)]  # the recording's configs; 3 runs; 2 annotations
TIME = "gpu__time_duration.sum"


@pytest.fixture(autouse=True)
def fresh_call() -> None:
    CALL_STATE.reset()


@pytest.fixture
def replaying_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ``ncu`` that runs the profiled process as is, then writes the recorded report."""
    script = tmp_path / "ncu"
    script.write_text(
        f"#!{sys.executable}\n"
        "import shutil, subprocess, sys\n"
        "argv = sys.argv[1:]\n"
        "open(argv[argv.index('--log-file') + 1], 'w').write('==PROF== fake ncu\\n')\n"
        "rc = subprocess.call(argv[argv.index('nsight_agent.engine.worker.entry') - 2:])\n"
        f"if rc == 0: shutil.copy({str(SWEEP / 'report.ncu-rep')!r}, "
        "argv[argv.index('--export') + 1] + '.ncu-rep')\n"
        "sys.exit(rc)\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("NCU", str(script))
    return script


def _sweep_body(n: Any) -> None:
    with nsight.annotate("triton_add"):
        pass
    with nsight.annotate("triton_scale"):
        pass


def test_every_scope_is_collected_where_nsight_python_collects_it(
    tmp_path: Path, replaying_ncu: Path
) -> None:
    """Once and config scopes in the calling process (nsight-python profiles in its own
    process, so their side effects are seen by the caller: its test_config_scope_collectors),
    run and annotation scopes in the profiled process, beside the kernels."""
    log = tmp_path / "calls.log"
    runs_seen = [0]
    configs_seen: list[int] = []

    def note(what: str) -> None:
        with log.open("a") as f:
            f.write(what + "\n")

    @collect(scope=CollectionScope.ONCE)
    def driver() -> str:
        note("once")
        return "580.159"

    @collect(scope="config")
    def elements(n: int) -> int:
        note(f"config {n}")
        configs_seen.append(n)
        return 2 * n

    @collect(scope=CollectionScope.RUN)
    def run_counter(*config: Any) -> int:
        note(f"run {config}")
        runs_seen[0] += 1  # the profiled process's own copy: 1 to 9 across the session
        return runs_seen[0]

    def label(annotation: str, n: int) -> str:
        note(f"annotation {annotation} {n}")
        return f"{annotation}@{n}"

    @collect(scope="run")
    def broken(n: int) -> float:
        return 1 / 0

    @collect(scope="config")
    def a_lock(n: int) -> Any:
        return threading.Lock()

    @analyze.kernel(
        configs=SIZES,
        runs=3,
        output_prefix=f"{tmp_path}/out/",
        verbosity="quiet",
        info_collectors=[
            driver,
            elements,
            run_counter,
            InfoCollector("label", label, CollectionScope.ANNOTATION),
            ("name_length", lambda annotation: len(annotation), "annotation"),
            broken,
            a_lock,
        ],
    )
    def sweep(n: int) -> None:
        _sweep_body(n)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = sweep()
    texts = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert (
        "Info collector 'broken' (run scope) raised ZeroDivisionError: division by zero. Its "
        "column will be None for failed runs." in texts
    )
    assert any(t.startswith("Some collected info was not picklable (a_lock: ") for t in texts)

    lines = log.read_text().splitlines()
    assert lines.count("once") == 1
    assert [x for x in lines if x.startswith("config")] == [f"config {n}" for (n,) in SIZES]
    assert sum(x.startswith("run") for x in lines) == 9 and "run (4096,)" in lines
    assert sum(x.startswith("annotation") for x in lines) == 18
    assert runs_seen == [0]  # run scope: in the profiled process, not here
    assert configs_seen == [n for (n,) in SIZES]  # config scope: here, in config order

    raw = results.raw_dataframe()
    names = ["driver", "elements", "run_counter", "label", "name_length", "broken", "a_lock"]
    assert list(raw.columns) == [*extract.RAW_COLUMNS, *names, "n"]
    first = raw[(raw.Annotation == "triton_scale") & (raw.n == 65536)]
    assert first.label.tolist() == ["triton_scale@65536"] * 3
    assert first.run_counter.tolist() == [4, 5, 6]
    assert first.broken.isna().all() and first.a_lock.isna().all()

    df = results.to_dataframe()
    row = df[(df.Annotation == "triton_add") & (df.n == 1048576)].iloc[0]
    assert row.driver == "580.159"  # once: one column, as collected
    assert (row.run_counter_Avg, row.run_counter_Min, row.run_counter_Max) == (8, 7, 9)
    assert row.run_counter_Std == pytest.approx(1.0)
    assert row.elements_Avg == 2 * 1048576 and row.elements_Std == 0
    assert row.label == "triton_add@1048576"  # not numeric: its value
    assert row.name_length_Avg == len("triton_add")
    assert "run_counter" not in df.columns and "elements" not in df.columns
    kernels = list(df.columns).index("Unit")
    assert list(df.columns)[kernels + 1] == "driver"  # after nsight-python's own columns
    assert results.artifacts["collected_info"].exists()


def test_tensor_configs_come_back_as_the_tensors_given(tmp_path: Path, replaying_ncu: Path) -> None:
    torch = pytest.importorskip("torch")
    tensors = [torch.full((2, 2), float(n)) for (n,) in SIZES]

    @analyze.kernel(configs=tensors, runs=3, output_prefix=f"{tmp_path}/", verbosity="quiet")
    def sweep(x: Any) -> None:
        assert x.shape == (2, 2)  # the profiled process got each tensor
        _sweep_body(x)

    df = sweep().to_dataframe()
    add = df[df.Annotation == "triton_add"]
    assert [v is t for v, t in zip(add.x, tensors)] == [True, True, True]
    assert add.NumRuns.tolist() == [3, 3, 3]


def test_tensor_configs_group_by_identity_without_sorting() -> None:
    """nsight-python's #63: one tensor repeated is one config, distinct equal-valued ones two."""
    torch = pytest.importorskip("torch")
    import pandas as pd

    one, other = torch.zeros((2, 2)), torch.zeros((2, 2))
    raw = pd.DataFrame(
        {
            "Annotation": ["a"] * 4, "Value": [1.0, 2.0, 3.0, 4.0], "Metric": ["m"] * 4,
            "Kernel": ["k"] * 4, "GPU": ["g"] * 4, "Host": ["h"] * 4, "ComputeClock": [1.0] * 4,
            "MemoryClock": [1.0] * 4, "Unit": ["ns"] * 4, "config": [one, one, other, other],
        }
    )  # fmt: skip
    out = aggregation.aggregate(raw, ["config"])
    assert len(out) == 2 and out.config.iloc[0] is one and out.config.iloc[1] is other
    assert out.NumRuns.tolist() == [2, 2]


def test_an_unknown_metric_through_analyze_says_invalid_value(
    tmp_path: Path, replaying_ncu: Path
) -> None:
    @analyze.kernel(configs=SIZES, runs=3, metrics=["invalid_value"], verbosity="quiet")
    def sweep(n: int) -> None:
        _sweep_body(n)

    with pytest.raises(UnknownMetricError) as err:
        sweep()
    assert str(err.value).startswith(
        "Invalid value ['invalid_value'] for 'metrics' parameter for nsight.analyze.kernel()."
    )


def f(n: int, dtype: str = "fp16") -> None: ...


@pytest.mark.parametrize(
    ("collectors", "error", "match"),
    [
        ([("GPU", len, "once")], InvalidRequestError, "collides with a reserved profiler column"),
        ([("n", len, "once")], InvalidRequestError, "collides with a parameter of 'f'"),
        ([("a", len, "run"), ("a", len, "config")], InvalidRequestError, "Duplicate info"),
        ([len], InvalidRequestError, "is missing @nsight.experimental.collect"),
        ([("a", len)], InvalidRequestError, r"must be \(name, callback, scope\)"),
        ([(1, len, "run")], TypeError, r"\(str name, callable callback, scope\)"),
        ([("a", len, "sometimes")], InvalidRequestError, "Invalid scope 'sometimes'"),
        ([42], TypeError, "Invalid collector type"),
    ],
)
def test_collectors_are_refused_at_decoration_time(
    collectors: list[Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        analyze.kernel(configs=[(1,)], info_collectors=collectors)(f)


def test_collect_marks_a_function_and_checks_its_scope() -> None:
    def temperature(n: int) -> int:
        return 42

    assert collect(temperature, scope="run") is temperature
    assert collecting.normalize([temperature]) == [("temperature", temperature, "run")]
    with pytest.raises(ValueError, match=r"Invalid collection scope 'hourly'\. Expected one of"):
        collect(scope="hourly")
    assert InfoCollector("v", lambda: "1.0", CollectionScope.ONCE).collect(1, 2) == "1.0"
    assert InfoCollector("s", lambda *a: sum(a), CollectionScope.CONFIG).collect(1, 2) == 3


def test_bind_args_gives_a_fixed_arity_collector_only_what_it_takes() -> None:
    assert bind_args(lambda name, n: 0, ("ann",), (1, "fp16")) == ["ann", 1]
    assert bind_args(lambda *a: 0, ("ann",), (1, "fp16")) == ["ann", 1, "fp16"]
    assert bind_args(lambda: 0, (), (1, 2)) == []
    assert bind_args(len, (), ([1],)) == [[1]]  # a builtin without a signature: everything


def test_the_collectors_runner_files_values_by_call_and_annotation(tmp_path: Path) -> None:
    runner = Collectors(
        [
            ("once", lambda: "x", "once"),
            ("size", lambda n: n, "config"),
            ("ann", lambda name, n: f"{name}{n}", "annotation"),
        ]
    )
    runner.once()
    try:
        runner.start_config((7,))
        runner.start_run()
        with nsight.annotate("a"):
            pass
        runner.end_call(0)
    finally:
        nsight.annotation.set_enter_hook(None)
    runner.write(str(tmp_path / "info.pkl"))
    collected = Collected.read(tmp_path / "info.pkl", ["once", "size", "ann"])
    assert collected.columns(0, "a") == {"once": "x", "size": 7, "ann": "a7"}
    assert collected.columns(0, "b") == {"once": "x", "size": 7, "ann": None}
    assert collected.columns(5, "a") == {"once": None, "size": None, "ann": None}
    assert Collected.read(None, ["once"]).columns(0, "a") == {"once": None}
