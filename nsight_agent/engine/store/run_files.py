"""A profiled run's files by role.

Apart from ``records`` (pydantic) because the nsight-python API's decorating import names its
files with it and should not pay for pydantic.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunFiles:
    """The files of one profiled run by role: what ncu and the profiled process write, and the
    tables read from them. A run folder's are ``in_folder``; ``analyze.kernel`` names its own
    after its output prefix."""

    report: Path  # the .ncu-rep
    ncu_log: Path
    program_output: Path  # the profiled program's stdout and stderr
    manifest: Path  # the harness's record of its calls, checks and kernels
    error: Path  # the traceback the profiled program writes when it fails
    progress: Path  # one line per call done
    raw_csv: Path
    processed_csv: Path

    @classmethod
    def in_folder(cls, run_dir: Path) -> RunFiles:
        return cls(
            report=run_dir / "report.ncu-rep",
            ncu_log=run_dir / "ncu.log",
            program_output=run_dir / "program-output.log",
            manifest=run_dir / "manifest.json",
            error=run_dir / "error.json",
            progress=run_dir / "progress.txt",
            raw_csv=run_dir / "raw.csv",
            processed_csv=run_dir / "processed.csv",
        )
