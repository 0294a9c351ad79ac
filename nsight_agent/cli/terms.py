"""One error model, two renderings: MCP calls named in our messages become ``nsight-agent``
commands at the command line.

The text of our errors, hints, warnings and paging notes names MCP calls
(``get_run(run_id='...')``, "the list_skills tool"), which is what an agent can act on; a person
at the command line gets the same text with each call replaced by the command that does the
same thing (``cli_terms``). Each rule pairs an MCP form with its command; a form with no
command-line equivalent is left as it is.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable

import nsight_agent.cli.parser as parser

_Q = r"'(?P<{}>(?:[^'\\]|\\.)*)'"  # a Python repr of a string (what the hints use)


def _arg(name: str) -> str:
    return _Q.format(name)


def _paging(m: re.Match[str]) -> str:
    """`` --offset N --limit M`` for the paging arguments that a call form carried."""
    out = ""
    if m.groupdict().get("offset") is not None:
        out += f" --offset {m['offset']}"
    if m.groupdict().get("limit") is not None:
        out += f" --limit {m['limit']}"
    return out


def _q(value: str) -> str:
    return shlex.quote(value.replace("\\'", "'"))


def _source_options(m: re.Match[str]) -> str:
    """``FILE --grid JSON --language L --entry E`` of a source call form's arguments."""
    out = shlex.quote(m["path"])
    if m["configs"]:
        out += f" --grid {shlex.quote(m['configs'])}"
    for name in ("language", "entry"):
        out += f" --{name} {m[name]}" if m[name] else ""
    return out


_OFFSET = r"(?:,\s*offset=(?P<offset>\d+))?"
_LIMIT = r"(?:,\s*limit=(?P<limit>\d+))?"

Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], str]]

RULES: list[Rule] = [
    (
        re.compile(rf"get_run\(run_id={_arg('run')}{_OFFSET}{_LIMIT}\)"),
        lambda m: f"`nsight-agent runs show {_q(m['run'])}{_paging(m)}`",
    ),
    (
        re.compile(rf"summarize_report\(path={_arg('path')}{_OFFSET}{_LIMIT}\)"),
        lambda m: f"`nsight-agent report {_q(m['path'])}{_paging(m)}`",
    ),
    (
        re.compile(rf"diagnose_kernel\(report_path={_arg('path')}{_OFFSET}{_LIMIT}\)"),
        lambda m: f"`nsight-agent diagnose {_q(m['path'])}{_paging(m)}`",
    ),
    (
        re.compile(rf"diagnose_kernel\(run_id={_arg('run')}{_OFFSET}{_LIMIT}\)"),
        lambda m: f"`nsight-agent diagnose --run-id {_q(m['run'])}{_paging(m)}`",
    ),
    (
        re.compile(
            r"diagnose_kernel\(source=<text of (?P<path>[^>]+)>(?:, configs=(?P<configs>\[.*?\]))?"
            r"(?:, language='(?P<language>\w+)')?(?:, entry='(?P<entry>\w+)')?\)"
        ),
        lambda m: f"`nsight-agent diagnose {_source_options(m)}`",
    ),
    (
        re.compile(rf"get_skill\({_arg('name')}\)"),
        lambda m: f"`nsight-agent skills {_q(m['name'])}`",
    ),
    (re.compile(r"get_skill\(<?(\w+)>?\)"), lambda m: f"`nsight-agent skills {m[1].upper()}`"),
    (re.compile(r"(?:see )?the list_skills tool"), lambda m: "`nsight-agent skills`"),
    (re.compile(r"the query_metrics tool"), lambda m: "`nsight-agent metrics WORDS`"),
    (
        re.compile(r"device_info\(probe_counters=(?:true|True)\)"),
        lambda m: "`nsight-agent doctor --probe`",
    ),
    (re.compile(r"\bdevice_info\b(?!\()"), lambda m: "`nsight-agent doctor`"),
    (
        re.compile(r"the runs resource nsight-agent://runs"),
        lambda m: "`nsight-agent runs`",
    ),
    (
        re.compile(r"method='timing' of profile_kernel or compare_variants"),
        lambda m: "`nsight-agent profile FILE --method timing` (or `compare`)",
    ),
    (
        re.compile(r"diagnose_kernel\(report_path=<(?P<path>[^>]+)>\)"),
        lambda m: f"`nsight-agent diagnose {m['path']}`",
    ),
    (re.compile(r"\boptions\.timeout_s\b"), lambda m: "--timeout"),
    (re.compile(r"clock_control='(\w+)'"), lambda m: f"--clock-control {m[1]}"),
    (re.compile(r"method='(\w+)'"), lambda m: f"--method {m[1]}"),
]


def cli_terms(text: str, command: str | None = None) -> str:
    """``text`` with every MCP call it names replaced by the command that does the same; for
    ``command``, an option it lacks named with the command that has it."""
    for pattern, replace in RULES:
        text = pattern.sub(replace, text)
    return text if command is None else _for_command(text, command)


# Options a message may name for the work of another command (a timing run, locked clocks):
# where the command answering has no such option, the message names the command that does.
_ELSEWHERE = re.compile(r"(?<![\w`-])--(method|clock-control) (\w+)")


def _for_command(text: str, command: str) -> str:
    found = next((c for c in parser.COMMANDS if c.name == command), None)
    if found is None:
        return text
    flags = {f for names, _ in found.options for f in names}
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside the commands already quoted
        parts[i] = _ELSEWHERE.sub(
            lambda m: m[0] if f"--{m[1]}" in flags else f"`nsight-agent profile FILE {m[0]}`",
            parts[i],
        )
    return "`".join(parts)
