"""A pre-launched target's end (``worker/target.py``): the harness's status, its atexit
handlers and everything it printed kept, the interpreter's teardown skipped (the attach waits
for the target's exit before it writes the report). Run for real, without ncu: the target
program waits for its job file, runs the job's script and ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nsight_agent.engine.worker import target

# Prints from Python and from the C library (no newline: held in libc's buffer until flushed),
# registers an atexit handler, leaves an object whose finaliser runs only in the interpreter's
# teardown, and exits with status 3.
JOB = """
import atexit, ctypes, sys
from pathlib import Path

print("from python", end="")
ctypes.CDLL(None).printf(b" from libc")
atexit.register(lambda: Path("atexit-ran").write_text("yes"))

class Teardown:
    def __del__(self):
        Path("teardown-ran").write_text("yes")

kept = Teardown()
sys.exit(3)
"""


def test_the_target_ends_with_the_jobs_status_its_output_and_atexit_but_no_teardown(
    tmp_path: Path,
) -> None:
    folder, run_dir = tmp_path / "target", tmp_path / "run"
    folder.mkdir()
    run_dir.mkdir()
    (run_dir / "job.py").write_text(JOB)
    output = run_dir / "program-output.txt"
    target.write_job(folder, target.TargetJob(str(run_dir), ["job.py"], str(output)))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), target.SERVER_ENV: "0"}
    done = subprocess.run(
        [sys.executable, "-m", target.__name__, str(folder)], env=env, timeout=120
    )
    assert done.returncode == 3
    assert json.loads((folder / target.EXIT_FILE).read_text()) == {"returncode": 3}
    assert output.read_text() == "from python from libc"
    assert (run_dir / "atexit-ran").read_text() == "yes"
    assert not (run_dir / "teardown-ran").exists()  # the interpreter's teardown was skipped
