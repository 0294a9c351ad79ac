"""The one subprocess runner: children carry a marker and die with us, output is capped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nsight_agent.engine import children, process

ESCAPE = (
    "import subprocess, time\n"
    "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
    "time.sleep(300)\n"
)


def test_children_carry_the_marker_and_a_timeout_kills_escaped_grandchildren(
    tmp_path: Path,
) -> None:
    with pytest.raises(process.RunTimeout):
        process.run_to_file(
            [sys.executable, "-c", ESCAPE],
            output_path=tmp_path / "out.log",
            timeout=2,
            tag="t1",
        )
    assert children.marked_processes(f"{children.owner_prefix()}t1") == {}


def test_leftovers_of_a_finished_child_are_killed(tmp_path: Path) -> None:
    code = "import subprocess; subprocess.Popen(['sleep', '300'], start_new_session=True)"
    done = process.run_to_file(
        [sys.executable, "-c", code], output_path=tmp_path / "o.log", timeout=30, tag="t2"
    )
    assert done.returncode == 0
    assert children.marked_processes(f"{children.owner_prefix()}t2") == {}


def test_a_poll_exception_kills_at_once(tmp_path: Path) -> None:
    start = time.monotonic()

    def cancel() -> None:
        if time.monotonic() - start > 0.3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        process.run_to_file(
            [sys.executable, "-c", ESCAPE],
            output_path=tmp_path / "o.log",
            timeout=60,
            poll=cancel,
            tag="t3",
        )
    # Killed before the call returned, not left to its 60 s limit: nothing marked is alive now.
    assert children.marked_processes(f"{children.owner_prefix()}t3") == {}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux only")
def test_a_child_dies_with_its_parent_even_on_sigkill(tmp_path: Path) -> None:
    parent = (
        "import sys; from pathlib import Path; from nsight_agent.engine import process\n"
        f"process.run_to_file([sys.executable, '-c', 'import time; time.sleep(300)'], "
        f"output_path=Path({str(tmp_path / 'o.log')!r}), timeout=300, tag='orphan')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], cwd=Path(__file__).parents[1])
    prefix = children.owner_prefix(proc.pid)
    deadline = time.monotonic() + 20
    while not children.marked_processes(prefix):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30  # a wait on state: returns as soon as the child is gone
    while children.marked_processes(prefix) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children.marked_processes(prefix) == {}


def test_output_is_capped_with_head_tail_and_the_cut_stated(tmp_path: Path) -> None:
    code = "import sys\nsys.stdout.write('H' * 1000 + 'x' * 3_000_000 + 'T' * 1000)"
    out = tmp_path / "o.log"
    process.run_to_file([sys.executable, "-c", code], output_path=out, timeout=30)
    text = out.read_text()
    assert len(text) < 2 * process.OUTPUT_HEAD + 2000
    assert text.startswith("H" * 1000) and text.endswith("T" * 1000)
    assert "nsight-agent cut" in text and "3002000 bytes" in text


def test_reap_orphans_spares_live_owners() -> None:
    env = dict(os.environ, **{children.MARKER: f"{os.getpid()}-mine.1"})
    mine = subprocess.Popen(["sleep", "30"], env=env)
    dead = dict(os.environ, **{children.MARKER: "999999999-gone.1"})
    orphan = subprocess.Popen(["sleep", "30"], env=dead)
    try:
        killed = children.reap_orphans()
        assert orphan.pid in killed and mine.pid not in killed
    finally:
        mine.kill()
        orphan.kill()
        mine.wait()
        orphan.wait()
