"""A pre-launched target: the program ``ncu --mode launch`` starts before its job, which
imports what a harness needs, then runs one harness. ``python -m
nsight_agent.engine.worker.target FOLDER``; ``worker/targets.py`` keeps them ready.

1. It imports what a rendered harness imports (numpy, torch, triton, nvtx, the harness
   runtime) without one CUDA call, so ncu does not suspend it yet, and says ready
   (``FOLDER/ready.json``).
2. It waits for its one job (``FOLDER/job.json``, written whole by a rename).
3. It runs the run folder's ``harness.py`` as ``python harness.py ARGS`` would there: the run
   folder as cwd and ``sys.path[0]``, the job's argv, stdout and stderr (fds 1 and 2, so what
   native code prints too) in the run's program output. ncu suspends it at its first CUDA
   call until ``ncu --mode attach`` connects (``collection/collect/attach.py``), then profiles it to
   the end.
4. It writes the harness's exit status (``FOLDER/exit.json``) and exits with it, once the
   atexit handlers ran and every stream is flushed, without the interpreter's teardown and
   the C library's exit handlers (``end``).

Single use: ncu 2025.3.1 attaches once per process. A watchdog thread ends the target and its
process group when the server that launched it is gone.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import runpy
import shutil
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

READY_FILE = "ready.json"
JOB_FILE = "job.json"
EXIT_FILE = "exit.json"
SERVER_ENV = "NSIGHT_AGENT_TARGET_SERVER"  # the pid of the server that launched it
POLL_S = 0.005  # how often the waiting target looks for its job (a stat, cheap)


@dataclass(frozen=True)
class TargetJob:
    """One harness run: where, with which arguments, its output where."""

    run_dir: str
    argv: list[str]  # sys.argv of the harness: ["harness.py", "--device", "cuda", ...]
    output: str  # the run's program output file
    env: dict[str, str] = field(default_factory=dict)  # added to the environment


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``path`` whole or not at all (a rename): a reader never sees half of it."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def write_job(folder: Path, job: TargetJob) -> None:
    write_json(folder / JOB_FILE, asdict(job))


def read_job(folder: Path) -> TargetJob:
    data = json.loads((folder / JOB_FILE).read_text())
    return TargetJob(str(data["run_dir"]), list(data["argv"]), str(data["output"]), data["env"])


def warm_imports() -> dict[str, Any]:
    """Import what every harness imports; no CUDA call (ncu would suspend the target here)."""
    import numpy
    import nvtx  # noqa: F401
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "numpy": numpy.__version__}
    with contextlib.suppress(ImportError):
        import triton
        import triton.language

        info["triton"] = triton.__version__
    import nsight_agent.annotation
    import nsight_agent.engine.harness.program  # noqa: F401  (the loader, adapters, checks)

    return info


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _watch(server: int, folder: Path) -> None:
    """End the target's whole process group (its ncu launcher too) once the server is gone,
    leaving no folder behind.

    The server, not the parent: how ncu starts its target (and whether an intermediate
    process exits) is ncu's business."""
    while True:
        if _gone(server):
            shutil.rmtree(folder, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.killpg(0, signal.SIGKILL)
            os._exit(137)
        time.sleep(0.25)


def wait_for_job(folder: Path) -> TargetJob:
    while not (folder / JOB_FILE).exists():
        time.sleep(POLL_S)
    return read_job(folder)


def _exit_code(code: object) -> int:
    """What the interpreter makes of ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_job(job: TargetJob) -> int:
    """``python harness.py ARGS`` in the run folder, in this process; its exit status."""
    run_dir = str(Path(job.run_dir).resolve())
    os.chdir(run_dir)
    sys.path.insert(0, run_dir)
    sys.argv = list(job.argv)
    os.environ.update(job.env)
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(job.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        runpy.run_path(job.argv[0], run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException:  # as the interpreter would: the traceback on stderr, status 1
        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def end(code: int) -> NoReturn:
    """Exit with ``code`` after the atexit handlers (the user's, torch's) and with every
    stream flushed (Python's and the C library's, where native code printed), skipping the
    interpreter's teardown and the C library's exit: the destructors of torch, the CUDA driver
    and ncu's injection, which the attach waits for before it writes the report
    (``bench/probes/attach_time.py`` timed both ends; the report was whole either way). What
    the job left running dies with the target's process group (``Target.kill``)."""
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)
    os._exit(code)


def main(argv: list[str]) -> NoReturn:
    folder = Path(argv[0]).resolve()  # the job moves the cwd
    server = int(os.environ.get(SERVER_ENV, "0") or 0)
    if server > 0:
        threading.Thread(target=_watch, args=(server, folder), daemon=True).start()
    start = time.monotonic()
    info = warm_imports()
    write_json(
        folder / READY_FILE, {"pid": os.getpid(), "seconds": time.monotonic() - start, **info}
    )
    code = run_job(wait_for_job(folder))
    write_json(folder / EXIT_FILE, {"returncode": code})
    end(code)


if __name__ == "__main__":
    main(sys.argv[1:])
