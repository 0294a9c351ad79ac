"""nsight-agent: Nsight Compute profiling as a Python API (nsight-python's) and MCP tools."""

from nsight_agent import errors
from nsight_agent.annotation import annotate
from nsight_agent.api import analyze
from nsight_agent.api.results import ProfileResults

__all__ = ["ProfileResults", "analyze", "annotate", "errors"]
__version__ = "0.1.0"
