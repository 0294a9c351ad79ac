"""nsight-agent: Nsight Compute profiling as a Python API (nsight-python's) and MCP tools.

nsight-python scripts port with one line: ``import nsight_agent as nsight``.
"""

from nsight_agent import errors, exceptions
from nsight_agent.annotation import annotate
from nsight_agent.api import analyze
from nsight_agent.api.compat import VerbosityLevel, col_panel, row_panel
from nsight_agent.api.results import ProfileResults

__all__ = [
    "ProfileResults",
    "VerbosityLevel",
    "analyze",
    "annotate",
    "col_panel",
    "errors",
    "exceptions",
    "row_panel",
]
__version__ = "0.1.0"
