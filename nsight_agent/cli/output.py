"""Where the command line writes: rich tables and colour on a terminal, plain stable text in a
pipe, progress on stderr.

- stdout on a terminal: rich renderables (``cli/tables.py``), coloured unless ``NO_COLOR`` is
  set (rich honours it; ``TERM=dumb`` too).
- stdout in a pipe or a file: the plain text of ``views/text.py`` (the same text MCP clients
  get), with MCP calls in command-line terms, so scripts and ``grep`` see stable lines.
- ``--json``: the model's JSON as before, untouched by either.
- progress on stderr: on a terminal a spinner with the stage and the elapsed time while ncu
  or a timing loop runs; elsewhere (an agent, CI) plain lines, one as each stage begins and
  within a long one at most one every few seconds (``cli/progress_lines.py``).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from rich.console import Console, RenderableType
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from nsight_agent.cli.progress_lines import Line, PlainLines, render
from nsight_agent.cli.terms import cli_terms


def _is_tty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(callable(isatty) and isatty()) and os.environ.get("TERM") != "dumb"


def rich_stdout() -> bool:
    """Tables on stdout: only when a person is looking at a terminal."""
    return _is_tty(sys.stdout)


def console(stderr: bool = False) -> Console:
    """A console on stdout (or stderr) that follows the terminal: colour only on a terminal and
    without ``NO_COLOR``; no highlighting of numbers we did not mean to colour."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(file=stream, highlight=False, soft_wrap=False, emoji=False)


def show(plain: str, fancy: RenderableType | None = None) -> None:
    """``fancy`` on a terminal, else ``plain`` (translated to command-line terms)."""
    if fancy is not None and rich_stdout():
        console().print(fancy)
    else:
        print(cli_terms(plain))


def error(text: str, command: str | None = None) -> None:
    """An error on stderr in command-line terms (of ``command``: only options it has, others
    named with the command that has them); "error:" in red on a colour terminal."""
    text = cli_terms(text, command)
    if _is_tty(sys.stderr):
        err = console(stderr=True)
        err.print("[bold red]error:[/] ", end="")
        err.print(text, markup=False, highlight=False)
    else:
        print(f"error: {text}", file=sys.stderr)


class ProgressFn(Protocol):
    def __call__(self, done: int, total: int, message: str) -> None: ...


@contextmanager
def progress(stage: str) -> Iterator[ProgressFn]:
    """A spinner on stderr saying ``stage`` (then each ``done/total message`` the pipeline
    reports) with the time elapsed; plain lines when stderr is not a terminal."""
    if not _is_tty(sys.stderr):
        with plain_progress(stage) as plain:
            yield plain
        return
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console(stderr=True),
        transient=True,
    )
    task = bar.add_task(stage, total=None)
    started = time.monotonic()

    def update(done: int, total: int, message: str) -> None:
        step = f" {done}/{total}" if total else ""
        bar.update(task, description=f"{stage}{step}: {message}")

    with bar:
        yield update
    seconds = time.monotonic() - started
    console(stderr=True).print(f"[dim]{stage}: done in {seconds:.1f} s[/]")


@contextmanager
def plain_progress(stage: str) -> Iterator[ProgressFn]:
    """``stage``, then the stages the call reports as lines (``progress_lines.PlainLines``),
    then how long it took; each line flushed at once (a pipe would hold them back)."""
    lines, started = PlainLines(), time.monotonic()

    def say(*shown: Line) -> None:
        for line in shown:
            print(render(line), file=sys.stderr, flush=True)

    def update(done: int, total: int, message: str) -> None:
        say(*lines.feed(time.monotonic() - started, done, total, message))

    print(f"{stage}", file=sys.stderr, flush=True)
    try:
        yield update
    finally:
        say(*lines.end())
    print(f"{stage}: done in {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
