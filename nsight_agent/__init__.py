"""nsight-agent: Nsight Compute profiling as a Python API (nsight-python's) and MCP tools.

nsight-python scripts port with one line: ``import nsight_agent as nsight``.

``analyze`` and ``ProfileResults`` (pandas, the engine) load on first use: every profiled
child process and warm worker imports this package for ``annotate``, and must not pay for
pandas at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from nsight_agent import errors, exceptions, experimental
from nsight_agent.annotation import annotate
from nsight_agent.api.compat import VerbosityLevel, col_panel, row_panel
from nsight_agent.experimental import CollectionScope, InfoCollector

if TYPE_CHECKING:
    from nsight_agent.api import analyze
    from nsight_agent.api.results import ProfileResults

_LAZY = {"analyze": "nsight_agent.api.analyze", "ProfileResults": "nsight_agent.api.results"}

__all__ = [
    "CollectionScope",
    "InfoCollector",
    "ProfileResults",
    "VerbosityLevel",
    "analyze",
    "annotate",
    "col_panel",
    "errors",
    "exceptions",
    "experimental",
    "row_panel",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'nsight_agent' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    value = module if name == "analyze" else getattr(module, name)
    globals()[name] = value
    return value
