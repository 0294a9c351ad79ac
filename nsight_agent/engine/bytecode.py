"""A bytecode cache for the Python processes we start, where the installed packages have none.

Every pre-flight, ncu harness and warm worker is a new interpreter that imports torch. Where
torch's modules carry no bytecode beside them (an image built with PYTHONDONTWRITEBYTECODE=1,
or a read-only site-packages), each of those interpreters compiles every torch source it
imports again: most of a pre-flight's time (cProfile, on the H200). Such a child
gets PYTHONPYCACHEPREFIX, a folder of our cache: the first child writes its bytecode there,
the next ones read it. A prefix the user set is theirs and stays; where torch's bytecode is
beside it already, nothing changes (a prefix would make Python ignore that bytecode).
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

PREFIX_ENV = "PYTHONPYCACHEPREFIX"
NO_WRITE_ENV = "PYTHONDONTWRITEBYTECODE"


def user_cache_dir() -> Path:
    """The user's cache folder for nsight-agent: platformdirs' where it is installed, else the
    XDG rule itself (a bare GPU image)."""
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("nsight-agent", appauthor=False))
    except ImportError:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "nsight-agent"


@functools.lru_cache(maxsize=4)
def bytecode_missing(package: str = "torch") -> bool:
    """Whether ``package`` is installed with no bytecode of its ``__init__`` beside it (found
    without importing it)."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return False
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return False
    beside = (
        Path(origin).parent / "__pycache__" / Path(importlib.util.cache_from_source(origin)).name
    )
    return not beside.exists()


def add_cache(env: dict[str, str], folder: Path | None = None) -> None:
    """Give a Python child's environment ``env`` our bytecode cache where torch has none
    (``folder``: where; the user cache's ``pycache`` by default). Writing is allowed for that
    child only when its bytecode goes to our folder, never beside the user's sources."""
    if env.get(PREFIX_ENV) or not bytecode_missing():
        return
    env[PREFIX_ENV] = str(folder or user_cache_dir() / "pycache")
    env.pop(NO_WRITE_ENV, None)
