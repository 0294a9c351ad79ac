"""A temporary ``nsight`` package that only re-exports nsight-agent's names, so code written for
nsight-python (its test suite, its examples) runs unchanged against our engine.

Used by scripts/run-nsight-python-suite and bench/fast_loop.py;
never installed.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

ALIAS = {
    "__init__.py": (
        "from nsight_agent import analyze, annotate, exceptions, VerbosityLevel\n"
        "from nsight_agent import col_panel, row_panel\n"
        "from nsight_agent import annotation\n"
        "from nsight_agent import experimental, CollectionScope, InfoCollector\n"
        "from nsight import utils\n"
        "__all__ = ['CollectionScope', 'InfoCollector', 'VerbosityLevel', 'analyze',\n"
        "           'annotate', 'experimental']\n"
    ),
    "experimental.py": "from nsight_agent.experimental import *  # noqa: F403\n",
    "info_collector.py": (
        "from nsight_agent.experimental.info_collectors import CollectionScope, InfoCollector\n"
    ),
    "exceptions.py": "from nsight_agent.exceptions import *  # noqa: F403\n",
    # nsight-python's utils names whether cuda-core imports; asked here only when read (importing
    # cuda.core costs 0.1 s, which nothing of our engine needs).
    "utils.py": (
        "from nsight_agent.api.compat import VerbosityLevel, col_panel, row_panel\n"
        "def __getattr__(name):\n"
        "    if name != 'CUDA_CORE_AVAILABLE':\n"
        "        raise AttributeError(name)\n"
        "    try:\n"
        "        import cuda.core  # noqa: F401\n"
        "        return True\n"
        "    except ImportError:\n"
        "        return False\n"
    ),
}


def write_alias(folder: Path) -> Path:
    """Write the ``nsight`` alias package into ``folder`` (put ``folder`` first on the path)."""
    package = folder / "nsight"
    package.mkdir(parents=True, exist_ok=True)
    for name, text in ALIAS.items():
        (package / name).write_text(text)
    return folder


PEER, OURS = "nsight-python-0.9.6", "nsight-agent"


def tool_paths() -> dict[str, str]:
    """PYTHONPATH for each side of a side-by-side run: ``import nsight`` resolves to the
    installed nsight-python, or to a fresh alias over our engine (the current folder's)."""
    alias = write_alias(Path(tempfile.mkdtemp(prefix="nsight-alias-")))
    base = os.environ.get("PYTHONPATH", "")
    return {PEER: base, OURS: os.pathsep.join([str(alias), base, os.getcwd()])}
