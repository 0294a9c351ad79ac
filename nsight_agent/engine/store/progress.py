"""A run's progress as its caller sees it: the lines a measuring program appends to the run's
``progress.txt`` ("done/total message", as the harness writes them), a thread that follows
that file while the caller waits on another process (the warm timing worker), and whether a
request's sources build code before they run (the compile stage).

The texts are ``nsight_agent/stages.py``'s, so the command line and MCP show the same words.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import nsight_agent.stages as stages
from nsight_agent.engine.harness.ext_builds import builds_extensions
from nsight_agent.engine.harness.program_io import append_progress as append

__all__ = ["append", "compile_stage", "following", "opening", "parse"]
from nsight_agent.request import ProfileRequest

Progress = Callable[[int, int, str], None]
FOLLOW_EVERY_S = 0.2


def parse(line: str) -> tuple[int, int, str] | None:
    """(done, total, message) of one line; None for a line that is not one."""
    counts, _, message = line.strip().partition(" ")
    done, sep, total = counts.partition("/")
    if not sep or not done.isdigit() or not total.isdigit():
        return None
    return int(done), int(total), message


def complete_lines(path: Path) -> list[str] | None:
    """The whole lines of a progress file (a line being written waits); None before the
    file exists."""
    try:
        text = path.read_text()
    except OSError:
        return None
    return text[: text.rfind("\n") + 1].splitlines()


def latest(path: Path) -> tuple[int, int, str] | None:
    """(done, total, message) of the file's last whole line; None while it has none."""
    lines = complete_lines(path)
    return parse(lines[-1]) if lines else None


def last_of_each_stage(lines: list[str]) -> list[tuple[int, int, str]]:
    """Of new lines, the last of each run of one stage, in order: a stage that began and
    ended between two looks is still shown, its every run line is not."""
    out: list[tuple[int, int, str]] = []
    for parsed in filter(None, map(parse, lines)):
        if out and stages.stage_of(out[-1][2]) == stages.stage_of(parsed[2]):
            out[-1] = parsed
        else:
            out.append(parsed)
    return out


@contextlib.contextmanager
def following(path: Path, on_progress: Progress | None) -> Iterator[None]:
    """While the block runs, each new stage (and the latest run of one) written to ``path``
    goes to ``on_progress``; what the file holds when the block ends is read once more."""
    if on_progress is None:
        yield
        return
    stop = threading.Event()
    seen = [0]

    def look() -> None:
        lines = complete_lines(path)
        if lines is None:  # not written yet
            return
        new, seen[0] = lines[seen[0] :], len(lines)
        for done, total, message in last_of_each_stage(new):
            on_progress(done, total, message)

    def watch() -> None:
        while not stop.wait(FOLLOW_EVERY_S):
            with contextlib.suppress(Exception):  # a caller's hook must not stop the follow
                look()

    thread = threading.Thread(target=watch, name="progress-follow", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        with contextlib.suppress(Exception):  # a caller's hook must not fail the run
            look()


def opening(say: Progress, request: ProfileRequest, total: int, preflight: str) -> None:
    """The stages said as a run starts: compile where its sources build code, then
    ``preflight`` (the pre-flight's own text)."""
    said = compile_stage(request)
    if said:
        say(0, total, said)
    say(0, total, preflight)


def compile_stage(request: ProfileRequest) -> str | None:
    """The compile stage's text when the request's sources build code (a CUDA source, a torch
    extension built at import), else None: Triton and torch sources have no such stage."""
    if request.language == "cuda" or any(builds_extensions(s) for s in request.sources()):
        return stages.COMPILE
    return None
