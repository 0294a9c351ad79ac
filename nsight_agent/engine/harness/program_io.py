"""What the harness program takes and leaves: its arguments (``Args``), the gate it waits at
when started beside the pre-flight, and the files it writes beside itself (``Files``: the
manifest, the progress lines, the error file) that ``collection/preflight_run.py`` and
``collection/measure.py`` read.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsight_agent.engine.harness.errors import SourceError
from nsight_agent.engine.harness.runtime import default_device, synchronize, user_location

ERROR_EXIT = 3


@dataclass
class Args:
    preflight: bool
    device: str
    prefix: str
    skip: list[str] = field(default_factory=list)
    gate: str = ""  # started beside the pre-flight: its verdict's file (wait_for_gate)
    op_ranges: bool = True  # off: no torch operator ranges (collection/collect/plain.py)


def parse_args(argv: list[str]) -> Args:
    parser = argparse.ArgumentParser(description="nsight-agent harness")
    parser.add_argument("--preflight", action="store_true", help="run without the profiler")
    parser.add_argument("--device", default=None, help="cuda (default when present) or cpu")
    parser.add_argument("--prefix", default="", help="prefix of the files written")
    parser.add_argument("--skip", default="", help="variants not to run (comma-separated)")
    parser.add_argument("--gate", default="", help="wait for this file: the variants to skip")
    parser.add_argument("--no-op-ranges", action="store_true", help="no torch operator ranges")
    ns = parser.parse_args(argv)
    device = ns.device or default_device()
    if os.environ.get("NSIGHT_AGENT_PREFLIGHT") == "1":
        ns.preflight = True
    skip = [s for s in str(ns.skip).split(",") if s]
    return Args(
        bool(ns.preflight), str(device), str(ns.prefix), skip, str(ns.gate), not ns.no_op_ranges
    )


def wait_for_gate(path: str, device: str) -> list[str] | None:
    """Started beside the pre-flight (collection/collect/early.py): bring CUDA up, then wait for
    the pre-flight's verdict: the variants to skip, or None when the run is stopped. Nothing
    of the user's is imported before it, so a candidate's build is the pre-flight's."""
    if device.startswith("cuda"):
        import torch

        torch.empty(1, device=device)  # the context, no kernel
        synchronize(device)
    gate = Path(path)
    while not gate.exists():  # the process's own limit ends a wait that nobody ends
        time.sleep(0.02)
    verdict = json.loads(gate.read_text())
    return None if verdict.get("stop") else [str(s) for s in verdict.get("skip", [])]


@dataclass
class Files:
    """Where the harness writes: beside itself, under an optional prefix (pre-flight). The
    folder is the one it started in, taken before any user code runs: a source that changes
    the working directory (``os.chdir``) still leaves its manifest in its run folder."""

    prefix: str
    manifest: dict[str, Any] = field(default_factory=dict)
    folder: Path = field(default_factory=Path.cwd)

    def path(self, name: str) -> Path:
        return self.folder / f"{self.prefix}{name}"

    def write_manifest(self) -> None:
        tmp = self.path("manifest.json.tmp")
        tmp.write_text(json.dumps(self.manifest, indent=1, default=str))
        tmp.replace(self.path("manifest.json"))

    def progress(self, done: int, total: int, message: str) -> None:
        append_progress(self.path("progress.txt"), done, total, message)

    def write_error(self, err: SourceError) -> None:
        self.path("error.json").write_text(json.dumps(err.to_dict(), indent=1))


def unexpected(exc: BaseException) -> SourceError:
    """A failure outside any stage (a harness bug or an interrupt), still structured."""
    file, line = user_location(exc)
    return SourceError(
        "entry",
        f"{type(exc).__name__}: {exc}",
        line=line,
        file=file,
        traceback=traceback.format_exc(),
    )


def append_progress(path: Path, done: int, total: int, message: str) -> None:
    """One line of a run's ``progress.txt``: ``done`` calls of ``total`` (0: not known in
    advance), then what is running (read back by ``engine/store/progress.py``)."""
    with open(path, "a") as f:
        f.write(f"{done}/{total} {message}\n")
