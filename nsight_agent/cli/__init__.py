"""``nsight-agent``: the same engine for people, on the same service layer as the MCP server.

Commands: profile, compare, diagnose, report, metrics, skills, runs, doctor, serve, demo;
baseline, diff, check, history (``cli/baselines.py``). The entry (``cli/main.py``) maps errors
to exit codes; each command (``cli/commands.py``) calls one use case of ``nsight_agent.service``.
"""

from __future__ import annotations

from nsight_agent.cli.inputs import parse_config, parse_configs
from nsight_agent.cli.main import build_parser, main

__all__ = ["build_parser", "main", "parse_config", "parse_configs"]
