"""engine.shipping through the real child process (``python -m nsight_agent.engine.worker.entry``),
no GPU and no ncu: nested functions, closures over tensors and numbers, lambdas, exec'd source,
methods, ``python -c`` and notebook-cell sources arrive by value; unpicklable captures are named."""

from __future__ import annotations

import json
import linecache
import pickle
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from nsight_agent.api import analyze
from nsight_agent.engine import process
from nsight_agent.engine.worker import shipping
from nsight_agent.engine.worker.child import ChildSpec


def write_fake_ncu(folder: Path) -> Path:
    """An ``ncu`` that runs the profiled program as is (no report): the child runner is real."""
    script = folder / "ncu"
    script.write_text(
        f"#!{sys.executable}\n"
        "import subprocess, sys\n"
        "argv = sys.argv[1:]\n"
        "open(argv[argv.index('--log-file') + 1], 'w').write('==PROF== fake ncu\\n')\n"
        "start = argv.index('nsight_agent.engine.worker.entry') - 2\n"
        "sys.exit(subprocess.call(argv[start:]))\n"
    )
    script.chmod(0o755)
    return script


def run_payload(tmp_path: Path, target: bytes, runs: int = 1) -> tuple[int, dict[str, Any], str]:
    """Run the child on a payload; (exit code, manifest, the error it recorded)."""
    spec = ChildSpec(
        target=target,
        runs=runs,
        manifest_path=str(tmp_path / "m.json"),
        progress_path=str(tmp_path / "p.txt"),
        error_path=str(tmp_path / "e.txt"),
        thermal_mode="off",
    )
    (tmp_path / "spec.pkl").write_bytes(pickle.dumps(spec))
    proc = subprocess.run(
        [sys.executable, "-m", "nsight_agent.engine.worker.entry", str(tmp_path / "spec.pkl")],
        env=process.child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    manifest = (
        json.loads((tmp_path / "m.json").read_text()) if (tmp_path / "m.json").exists() else {}
    )
    error = (tmp_path / "e.txt").read_text() if (tmp_path / "e.txt").exists() else proc.stderr
    return proc.returncode, manifest, error


def run_shipped(
    tmp_path: Path, fn: Callable[..., Any], configs: Sequence[tuple[Any, ...]], runs: int = 1
) -> tuple[int, dict[str, Any], str]:
    return run_payload(tmp_path, shipping.ship(fn, configs=configs), runs)


def header(payload: bytes) -> dict[str, Any]:
    data: dict[str, Any] = pickle.loads(payload)
    return data


def test_nested_function_runs_every_config_by_value(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"

    def nested(n: int, scale: int = 2) -> None:
        with out.open("a") as f:
            f.write(f"{n * scale}\n")

    payload = shipping.ship(nested, configs=[(1, 2), (5, 3)])
    assert header(payload)["how"] == "value"
    rc, manifest, error = run_payload(tmp_path, payload, runs=2)
    assert rc == 0, error
    assert out.read_text().split() == ["2", "2", "15", "15"]
    assert [(c["config"], c["run"]) for c in manifest["calls"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert (tmp_path / "p.txt").read_text().split() == ["1/4", "2/4", "3/4", "4/4"]


def test_closure_over_a_tensor_and_a_number(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    out = tmp_path / "out.json"
    weights = torch.arange(4, dtype=torch.float32)
    scale = 2.5

    def closure(n: int) -> None:
        out.write_text(json.dumps((weights * scale + n).tolist()))

    rc, _, error = run_shipped(tmp_path, closure, [(1,)])
    assert rc == 0, error
    assert json.loads(out.read_text()) == [1.0, 3.5, 6.0, 8.5]


def test_a_lambda_and_tensor_configs(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    out = tmp_path / "out.txt"
    fn = lambda t, k: out.write_text(str(float((t * k).sum())))  # noqa: E731
    rc, _, error = run_shipped(tmp_path, fn, [(torch.ones(3), 4)])
    assert rc == 0, error
    assert out.read_text() == "12.0"


@pytest.mark.parametrize("namespace", [{}, {"__name__": "generated_not_importable"}])
def test_a_function_from_exec_source(tmp_path: Path, namespace: dict[str, Any]) -> None:
    out = tmp_path / "out.txt"
    source = textwrap.dedent(
        f"""
        OFFSET = 100
        def helper(n):
            return n + OFFSET
        def generated(n):
            open({str(out)!r}, "w").write(str(helper(n)))
        """
    )
    exec(compile(source, "<generated>", "exec"), namespace)
    rc, _, error = run_shipped(tmp_path, namespace["generated"], [(7,)])
    assert rc == 0, error
    assert out.read_text() == "107"


class Scaler:
    """A module-level class: its instances travel with their state, the class by reference."""

    def __init__(self, factor: int, out: Path) -> None:
        self.factor = factor
        self.out = out

    def apply(self, n: int) -> None:
        self.out.write_text(str(n * self.factor))


def test_a_bound_method_and_a_local_class(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    rc, _, error = run_shipped(tmp_path, Scaler(3, out).apply, [(5,)])
    assert rc == 0, error
    assert out.read_text() == "15"

    class Local:
        def __init__(self) -> None:
            self.base = 40

        def run(self, n: int) -> None:
            out.write_text(str(self.base + n))

    rc, _, error = run_shipped(tmp_path, Local().run, [(2,)])
    assert rc == 0, error
    assert out.read_text() == "42"


def test_keyword_only_parameters_are_passed_by_name(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"

    def kw(x: int, *args: Any, y: int, z: int = 1, **rest: Any) -> None:
        out.write_text(f"{x} {y} {z} {args} {rest}")

    rc, _, error = run_shipped(tmp_path, kw, [(1, 2, 3)])
    assert rc == 0, error
    assert out.read_text() == "1 2 3 () {}"


def test_a_function_from_python_dash_c(tmp_path: Path) -> None:
    out, payload = tmp_path / "out.txt", tmp_path / "payload.bin"
    program = (
        "from nsight_agent.engine.worker import shipping\n"
        f"def cmdline(n):\n    open({str(out)!r}, 'w').write('from -c %d' % n)\n"
        f"open({str(payload)!r}, 'wb').write(shipping.ship(cmdline, configs=[(9,)]))\n"
    )
    subprocess.run([sys.executable, "-c", program], env=process.child_env(), check=True, timeout=60)
    rc, _, error = run_payload(tmp_path, payload.read_bytes())
    assert rc == 0, error
    assert out.read_text() == "from -c 9"


def test_the_users_traceback_shows_a_cells_file_line_and_source(tmp_path: Path) -> None:
    # IPython names a cell's code like this and keeps its text only in linecache.
    cell = "/tmp/ipykernel_0/1234567.py"
    source = "def in_a_cell(n):\n    raise KeyError(f'no input {n}')\n"
    linecache.cache[cell] = (len(source), None, source.splitlines(True), cell)
    namespace: dict[str, Any] = {"__name__": "__main__"}
    try:
        exec(compile(source, cell, "exec"), namespace)
        payload = shipping.ship(namespace["in_a_cell"], configs=[(3,)])
    finally:
        del linecache.cache[cell]
    rc, _, error = run_payload(tmp_path, payload)
    assert rc == 3
    assert f'File "{cell}", line 2, in in_a_cell' in error
    assert "raise KeyError(f'no input {n}')" in error  # the cell's text came with the payload
    assert "KeyError: 'no input 3'" in error and "config #0 (3,), run 0" in error
    assert "engine/worker/child.py" not in error  # the runner's own frames are left out


def test_an_unpicklable_closure_is_named(tmp_path: Path) -> None:
    lock = threading.Lock()

    def holds_a_lock(n: int) -> None:
        with lock:
            pass

    with pytest.raises(shipping.ShippingError, match=r"closure variable 'lock' of type lock"):
        shipping.ship(holds_a_lock, configs=[(1,)])


def test_unpicklable_configs_are_named() -> None:
    with pytest.raises(shipping.ShippingError, match=r"configs .* value #1 of type lock"):
        shipping.ship(lambda a, b: None, configs=[(1, threading.Lock())])


LOCK = threading.Lock()


@analyze.kernel
def uses_a_module_lock(n: str) -> None:
    with LOCK:
        Path(n).write_text("by name")


def test_by_value_failure_falls_back_to_import_by_name(tmp_path: Path) -> None:
    # The module's name is the decorator's wrapper, so cloudpickle sends the function by value,
    # which fails on the lock; the worker imports this module and unwraps the decorator instead.
    out = tmp_path / "out.txt"
    with pytest.warns(shipping.ShippingWarning, match=r"global 'LOCK' of type lock"):
        payload = shipping.ship(uses_a_module_lock.func, configs=[(str(out),)])
    assert header(payload)["how"] == "name"
    assert header(payload)["name"]["module"] == __name__
    rc, _, error = run_payload(tmp_path, payload)
    assert rc == 0, error
    assert out.read_text() == "by name"


def test_unship_in_process_and_a_missing_module(tmp_path: Path) -> None:
    shipped = shipping.unship(shipping.ship(lambda x: x + 1, args=(1,), kwargs={"k": 2}))
    assert shipped.func(shipped.args[0]) == 2 and shipped.kwargs == {"k": 2}
    assert shipped.how == "value" and "<lambda>" in shipped.origin
    rc, _, error = run_payload(
        tmp_path, shipping.ship_by_name("no_such_module_xyz", "f", configs=[(1,)])
    )
    assert rc == 3 and "cannot import no_such_module_xyz" in error


def test_importable_tells_fresh_processes_apart() -> None:
    assert shipping.importable("json") and shipping.importable(__name__)
    assert not shipping.importable("no_such_module_xyz")
    namespace: dict[str, Any] = {}
    exec(
        "import types, sys\nm = types.ModuleType('made_up')\nsys.modules['made_up'] = m", namespace
    )
    try:
        assert not shipping.importable("made_up")
    finally:
        del sys.modules["made_up"]
