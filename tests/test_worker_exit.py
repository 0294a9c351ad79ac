"""How the profiled child starts and leaves (engine/worker/entry.py), through the real child
process with no GPU and no ncu: it leaves by ``os._exit`` once its files are written (ncu waits
for the process to end before it writes the report, and the interpreter's teardown of torch and
the CUDA context cost about 0.4 s of that on an H100), with what the function printed flushed;
``NSIGHT_AGENT_CHILD_EXIT=normal`` keeps the teardown. The CUDA driver's start in a thread
(cuda_early.py) is left out where there is no driver."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import nvtx
import pytest

from nsight_agent.annotation import NCU_NVTX_INCLUDE, WARMUP_KERNEL
from nsight_agent.engine import process
from nsight_agent.engine.worker import cuda_early, shipping
from nsight_agent.engine.worker.child import ChildSpec
from nsight_agent.engine.worker.entry import EXIT_ENV
from tests.test_engine_shipping import run_payload


def run_child(
    tmp_path: Path, fn: Any, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    spec = ChildSpec(
        target=shipping.ship(fn, configs=[(1,), (2,)]),
        runs=1,
        manifest_path=str(tmp_path / "m.json"),
        progress_path=str(tmp_path / "p.txt"),
        error_path=str(tmp_path / "e.txt"),
        thermal_mode="off",
    )
    (tmp_path / "spec.pkl").write_bytes(pickle.dumps(spec))
    # Buffered output (the engine runs its children unbuffered; a user's own sys.stdout may not
    # be): what the function printed stays in Python's buffer until the child flushes it.
    child_env = {k: v for k, v in process.child_env().items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.run(
        [sys.executable, "-m", "nsight_agent.engine.worker.entry", str(tmp_path / "spec.pkl")],
        env={**child_env, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, json.loads((tmp_path / "m.json").read_text())


def teardown_marker(folder: Path) -> Any:
    marker = folder / "teardown-ran"

    def fn(n: int) -> None:
        import atexit

        atexit.register(marker.write_text, "yes")  # runs only if the interpreter tears down
        print(f"call {n} ", end="")  # no newline: left in Python's buffer until flushed
        print(f"warn {n}", end="", file=sys.stderr)

    return fn


@pytest.mark.parametrize("how", ["default", "normal"])
def test_the_child_leaves_with_its_output_flushed_and_skips_teardown_unless_asked(
    tmp_path: Path, how: str
) -> None:
    env = {EXIT_ENV: "normal"} if how == "normal" else {}
    proc, manifest = run_child(tmp_path, teardown_marker(tmp_path), env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "call 1 call 2 "
    assert "warn 1warn 2" in proc.stderr
    assert [c["config"] for c in manifest["calls"]] == [0, 1]
    assert (tmp_path / "teardown-ran").exists() is (how == "normal")


def test_a_failing_function_still_reports_its_error_and_exit_code(tmp_path: Path) -> None:
    def fails(n: int) -> None:
        raise ValueError(f"bad {n}")

    rc, _, error = run_payload(tmp_path, shipping.ship(fails, configs=[(7,)]))
    assert rc == 3
    assert "ValueError: bad 7" in error


def test_the_early_cuda_thread_gives_up_quietly_without_a_driver() -> None:
    assert cuda_early.bring_up("init", library="libno-such-driver.so.1") is False
    assert cuda_early.bring_up("context", library="libno-such-driver.so.1") is False


@pytest.mark.parametrize(
    ("value", "starts"),
    [
        (None, True),
        ("init", True),
        ("context", True),
        ("warmup", True),
        ("off", False),
        ("bogus", False),
    ],
)
def test_the_early_cuda_thread_follows_its_setting(
    monkeypatch: pytest.MonkeyPatch, value: str | None, starts: bool
) -> None:
    ran: list[str] = []

    def records(mode: str) -> bool:
        ran.append(mode)
        return False

    monkeypatch.setattr(cuda_early, "bring_up", records)
    if value is None:
        monkeypatch.delenv(cuda_early.ENV, raising=False)
    else:
        monkeypatch.setenv(cuda_early.ENV, value)
    thread = cuda_early.start()
    assert (thread is not None) is starts
    if isinstance(thread, threading.Thread):
        thread.join(10)
        assert thread.daemon
        assert ran == [value or "init"]
    else:
        assert ran == []


def test_a_fake_driver_is_started_in_the_order_cuda_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in libcuda (built here with the C compiler) records the calls it gets."""
    if not (cc := os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler to build the stand-in driver")
    log = tmp_path / "calls.txt"
    source = tmp_path / "fake_cuda.c"
    source.write_text(FAKE_DRIVER.replace("LOG", str(log)))
    library = tmp_path / "libfakecuda.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    assert cuda_early.bring_up("init", library=str(library)) is True
    assert log.read_text().split() == ["cuInit(0)"]
    log.unlink()
    assert cuda_early.bring_up("context", library=str(library)) is True
    assert log.read_text().split() == ["cuInit(0)", "cuDeviceGet(0)", "cuDevicePrimaryCtxRetain(7)"]
    log.unlink()
    # warmup: the empty kernel is loaded, then launched and waited for inside the scope range
    # ncu profiles, opened through a domain object of its own (ncu stopped matching annotate's
    # ranges once the warm-up's thread had opened one with the same cached handle).
    # The NVTX calls stand in here, writing to the same log.

    class OwnDomain:
        def __init__(self, name: str) -> None:
            self.name = name

        def start_range(self, *, message: str) -> int:
            with log.open("a") as f:
                f.write(f"nvtx.start({self.name}@{message})=40\n")
            return 40

        def end_range(self, rid: int) -> None:
            with log.open("a") as f:
                f.write(f"nvtx.end({rid})\n")

    def shared(*_: object, **__: object) -> None:
        raise AssertionError("the warm-up used nvtx's shared (cached) domain")

    monkeypatch.setattr(nvtx, "Domain", OwnDomain)
    monkeypatch.setattr(nvtx, "start_range", shared)
    monkeypatch.setattr(nvtx, "get_domain", shared)
    assert cuda_early.bring_up("warmup", library=str(library)) is True
    assert log.read_text().split() == [
        "cuInit(0)",
        "cuDeviceGet(0)",
        "cuDevicePrimaryCtxRetain(7)",
        "cuCtxSetCurrent(1)",
        f"cuModuleLoadData({WARMUP_KERNEL})",
        f"cuModuleGetFunction({WARMUP_KERNEL})",
        f"nvtx.start({NCU_NVTX_INCLUDE})=40",
        "cuLaunchKernel(1x1x1)",
        "cuCtxSynchronize(0)",
        "nvtx.end(40)",
    ]


FAKE_DRIVER = r"""
#include <stdio.h>
#include <string.h>
static void say(const char *what, int n) {
    FILE *f = fopen("LOG", "a");
    fprintf(f, "%s(%d)\n", what, n);
    fclose(f);
}
int cuInit(unsigned flags) { say("cuInit", (int)flags); return 0; }
int cuDeviceGet(int *device, int ordinal) { say("cuDeviceGet", ordinal); *device = 7; return 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int device) {
    say("cuDevicePrimaryCtxRetain", device); *ctx = (void *)0x1; return 0;
}
int cuCtxSetCurrent(void *ctx) { say("cuCtxSetCurrent", (int)(long)ctx); return 0; }
static void named(const char *what, const char *name) {
    FILE *f = fopen("LOG", "a");
    fprintf(f, "%s(%s)\n", what, name);
    fclose(f);
}
int cuModuleLoadData(void **module, const char *image) {
    /* the kernel's name, as the PTX declares it */
    const char *entry = strstr(image, ".entry ");
    char name[64] = "?";
    if (entry) sscanf(entry + 7, "%63[A-Za-z0-9_]", name);
    named("cuModuleLoadData", name); *module = (void *)0x2; return 0;
}
int cuModuleGetFunction(void **function, void *module, const char *name) {
    named("cuModuleGetFunction", name); *function = (void *)0x3; return 0;
}
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    FILE *out = fopen("LOG", "a");
    fprintf(out, "cuLaunchKernel(%ux%ux%u)\n", gx * bx, gy * by, gz * bz);
    fclose(out);
    return f == (void *)0x3 ? 0 : 1;
}
int cuCtxSynchronize(void) { say("cuCtxSynchronize", 0); return 0; }
"""
