"""Recorded reports kept xz-compressed in tests/fixtures (a support module, not a test file)."""

from __future__ import annotations

import functools
import lzma
import shutil
import tempfile
from pathlib import Path


@functools.cache
def unpacked(path: Path) -> Path:
    """``path`` itself, or for ``*.ncu-rep.xz`` the report decompressed once per test process
    into a temporary folder (ncu_report opens files, not streams)."""
    if path.suffix != ".xz":
        return path
    target = Path(tempfile.mkdtemp(prefix="nsight-agent-fixture-")) / path.stem
    with lzma.open(path, "rb") as src, target.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return target
