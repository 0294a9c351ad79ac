"""Progress everywhere: with stderr piped (an agent, CI) the command line prints one line as
each stage begins (validation, pre-flight, the timing loop's adaptive plan, config i of n and
its runs, collect), and MCP progress notifications carry the same texts. Real runs on the CPU
timing path: a torch example of examples/ through the CLI in a subprocess, and through the
SDK's in-process client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mcp import Client

from nsight_agent import stages
from nsight_agent.cli.progress_lines import PlainLines, render
from nsight_agent.engine.store import progress
from nsight_agent.engine.worker.timer import CPU_PROBE_ENV
from nsight_agent.server.app import build_server

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "examples" / "contract" / "torch_softmax.py"
TINY = ["--config", "rows=8", "cols=16"]


def test_plain_lines_show_each_stage_and_hold_back_the_runs_between() -> None:
    lines = PlainLines(every_s=5.0)
    assert lines.feed(0.0, 0, 0, stages.VALIDATION) == [(0.0, stages.VALIDATION)]
    assert lines.feed(0.1, 0, 0, stages.VALIDATION) == []  # the same text again: nothing
    assert lines.feed(1.0, 1, 0, "config 1 of 2: run 1 (adaptive)")
    assert lines.feed(2.0, 2, 0, "config 1 of 2: run 2 (adaptive)") == []  # held back
    assert lines.feed(3.0, 3, 0, "config 1 of 2: run 3 (adaptive)") == []
    # a new stage shows the last line the old one held, then itself
    assert lines.feed(4.0, 4, 0, "config 2 of 2: run 1 (adaptive)") == [
        (3.0, "config 1 of 2: run 3 (adaptive)"),
        (4.0, "config 2 of 2: run 1 (adaptive)"),
    ]
    assert lines.feed(9.5, 9, 0, "config 2 of 2: run 9 (adaptive)") == [
        (9.5, "config 2 of 2: run 9 (adaptive)")
    ]  # a long stage: one line every 5 s
    assert lines.feed(10.0, 10, 0, "config 2 of 2: run 10 (adaptive)") == []
    assert lines.end() == [(10.0, "config 2 of 2: run 10 (adaptive)")]
    assert lines.feed(11.0, 3, 8, "config 1 of 2: run 2 of 4, torch") == [
        (11.0, "config 1 of 2: run 2 of 4, torch (3/8 calls)")
    ]
    assert render((12.34, "collect: x")) == "[  12.3 s] collect: x"


def test_the_follower_shows_every_stage_of_a_file_written_meanwhile(tmp_path: Path) -> None:
    path = tmp_path / "progress.txt"
    seen: list[tuple[int, int, str]] = []

    def writer() -> None:
        for run in range(30):
            progress.append(path, run + 1, 0, stages.config_run(run // 20, 2, run % 20))
            time.sleep(0.005)
        with open(path, "a") as f:
            f.write("3/0 config 2 of 2: run 11 (a line still being writ")  # no newline yet

    with progress.following(path, lambda d, t, m: seen.append((d, t, m))):
        thread = threading.Thread(target=writer)
        thread.start()
        thread.join()
    messages = [m for _, _, m in seen]
    assert messages[-1] == "config 2 of 2: run 10 (adaptive)", messages
    assert "config 1 of 2: run 20 (adaptive)" in messages  # the last run of config 1
    assert messages == sorted(messages, key=messages.index)  # in file order
    assert progress.parse("not a progress line") is None


def test_the_ncu_runs_poll_says_the_harness_latest_whole_line_once(tmp_path: Path) -> None:
    from nsight_agent.engine import pipeline

    path = tmp_path / "progress.txt"
    seen: list[tuple[int, int, str]] = []
    poll = pipeline._poller(None, lambda d, t, m: seen.append((d, t, m)), path, 12)
    poll()  # no file yet: nothing
    progress.append(path, 1, 12, "config 1 of 3: run 1 of 2, ref")
    progress.append(path, 2, 12, "config 1 of 3: run 1 of 2, new")
    with open(path, "a") as f:
        f.write("3/12 config 1 of 3: run 2 of 2, r")  # being written: waits
    poll()
    poll()  # nothing new: nothing said again
    with open(path, "a") as f:
        f.write("ef\n")
    poll()
    assert seen == [
        (2, 12, "config 1 of 3: run 1 of 2, new"),
        (3, 12, "config 1 of 3: run 2 of 2, ref"),
    ]


def test_only_sources_that_build_code_have_a_compile_stage() -> None:
    from nsight_agent.request import ProfileRequest

    torch_source = SOFTMAX.read_text()
    plain = ProfileRequest(source=torch_source, language="torch", configs=[{"rows": 1}])
    assert progress.compile_stage(plain) is None
    built = plain.model_copy(update={"source": torch_source + "\n# load_inline(...)\n"})
    assert progress.compile_stage(built) == stages.COMPILE


def _cli(*args: str, root: Path) -> subprocess.CompletedProcess[str]:
    # the CPU speed probe on, as a user has it (the tests otherwise turn it off)
    env = {**os.environ, "NSIGHT_AGENT_RUNS": str(root), CPU_PROBE_ENV: "1"}
    return subprocess.run(
        [sys.executable, "-m", "nsight_agent", *args],
        capture_output=True,  # stderr is a pipe, not a terminal
        text=True,
        timeout=600,
        env=env,
        cwd=ROOT,
    )


def _in_order(err: str, wanted: list[str]) -> None:
    lines = err.splitlines()
    at = 0
    for text in wanted:
        found = next((i for i in range(at, len(lines)) if text in lines[i]), None)
        assert found is not None, f"{text!r} not after line {at} of:\n{err}"
        at = found + 1


def test_a_piped_cli_prints_each_stage_in_order(tmp_path: Path) -> None:
    argv = ["profile", str(SOFTMAX), "--language", "torch", "--method", "timing", *TINY]
    p = _cli(*argv, "--runs", "5", "--json", root=tmp_path)
    assert p.returncode == 0, p.stderr
    _in_order(
        p.stderr,
        [
            "profiling torch_softmax.py: timing (warm worker, no ncu)",
            "] validation: checking the request",
            "] pre-flight: running every config once",
            "] timing: runs adaptive from 5 up to 200 a config until stable",
            "] config 1 of 1: run ",
            "] collect: ",
            "profiling torch_softmax.py: timing (warm worker, no ncu): done in",
        ],
    )
    assert p.stdout.lstrip().startswith("{")  # stdout keeps the JSON alone
    run_id = json.loads(p.stdout)["run_id"]
    assert _cli("baseline", "set", "main", run_id, root=tmp_path).returncode == 0
    check = _cli("check", str(SOFTMAX), "--baseline", "main", root=tmp_path)
    # Any verdict the machine's load gives (0 ok, 1 regression, 3 not comparable), never a
    # usage error or a crash: the stages are this test's subject; the verdict's honesty under
    # load is bench/gate_under_load.py's, which loads the machine on purpose.
    assert check.returncode in (0, 1, 3), check.stdout + check.stderr
    _in_order(
        check.stderr,
        [
            "checking torch_softmax.py against baseline 'main'",
            "] validation:",
            "] pre-flight:",
            "] timing: runs adaptive",
            "] config 1 of 1: run ",
            "] collect:",
        ],
    )
    assert "why #0:" in check.stdout or "NOT COMPARABLE" in check.stdout, check.stdout


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_progress_notifications_carry_the_stages(tmp_path: Path) -> None:
    said: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        said.append((done, total, message))

    args = {
        "source": SOFTMAX.read_text(),
        "configs": [{"rows": 8, "cols": 16}, {"rows": 16, "cols": 16}],
        "language": "torch",
        "method": "timing",
    }
    async with Client(build_server(tmp_path)) as client:
        result = await client.call_tool("profile_kernel", args, progress_callback=on_progress)
    assert not result.is_error, result.content
    messages = [m or "" for _, _, m in said]
    order = [
        stages.VALIDATION,
        stages.PREFLIGHT_WARM,
        "timing: runs adaptive from 5 up to 200",
        "config 1 of 2: run",
        "config 2 of 2: run",
        stages.CHECK,
    ]
    at = 0
    for text in order:
        at = next(i for i in range(at, len(messages)) if messages[i].startswith(text)) + 1
    runs = [(d, t) for d, t, m in said if (m or "").startswith("config ")]
    assert runs and all(t is None for _, t in runs)  # the adaptive count is not known before
    assert [d for d, _, _ in said] == sorted(d for d, _, _ in said)  # the value never goes back


@pytest.mark.gpu
def test_the_ncu_path_and_a_cuda_build_say_their_stages_in_a_pipe(tmp_path: Path) -> None:
    """On a GPU with ncu: the profiled program's "config i of n: run j of m, VARIANT" lines
    with the calls done, the collect stages; a CUDA source's compile stage before its
    pre-flight."""
    argv = ["compare", str(SOFTMAX), "--language", "torch", "--variant", "torch=run"]
    argv += ["--variant", "manual=manual_softmax", "--config", "rows=256", "cols=256"]
    p = _cli(*argv, "--config", "rows=512", "cols=256", "--runs", "3", root=tmp_path)
    assert p.returncode == 0, p.stderr
    _in_order(
        p.stderr,
        [
            "] validation:",
            "] pre-flight: running the harness once without the profiler",
            "] collect: profiling under ncu",
            "] config ",  # "config i of 2: run j of 3, VARIANT (k/12 calls)"
            "] collect: reading the report",
        ],
    )
    cuda = ROOT / "examples" / "contract" / "cuda_vector_add.py"
    argv = ["compare", str(cuda), "--language", "cuda", "--method", "timing"]
    argv += ["--variant", "torch=reference", "--variant", "cuda=run", "--config", "n=4096"]
    built = _cli(*argv, root=tmp_path)
    assert built.returncode == 0, built.stderr
    _in_order(built.stderr, ["] validation:", "] compile: ", "] pre-flight:", "] timing: "])
