"""The ``nsight-agent`` command's entry: parse, run one command, map errors to exit codes.

Commands: profile, compare, diagnose, report, metrics, skills, runs, doctor, serve, demo;
baseline, diff, check, history (``cli/baselines.py``; ``check`` also exits 3: not comparable).
Exit codes: 0 ok, 1 failure (the work could not be done: no ncu, a broken kernel, ...), 2 usage
(bad arguments, an unknown metric, a file that is not a report). A request the validation stage
rejects lists every problem at once and exits 2 when any of them is usage (a field, a name, an
option the method cannot honour, a file that is not Python), else 1 (the kernel source alone:
a syntax error, a missing setup or entry, a KernelBench file without its classes).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pydantic import ValidationError

# Submodules by full name: "from nsight_agent.cli import ..." would import this package's
# __init__, which imports this module (a cycle).
import nsight_agent.cli.baselines as baselines
import nsight_agent.cli.commands as commands
import nsight_agent.cli.compare as compare
import nsight_agent.cli.output as output
import nsight_agent.cli.parser as parser
from nsight_agent.arguments import validation_text
from nsight_agent.errors import (
    MISSING_CONFIG,
    ExtractionError,
    InvalidRequestError,
    NsightAgentError,
    RequestRejected,
    UnknownMetricError,
)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``parser.COMMANDS``, each command running ``commands.cmd_<name>``."""
    found = (commands, compare, baselines)  # baselines: baseline, diff, check, history
    return parser.build(
        {
            c.name: next(getattr(m, f"cmd_{c.name}") for m in found if hasattr(m, f"cmd_{c.name}"))
            for c in parser.COMMANDS
        }
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # exits 2 on a usage error
    try:
        return int(args.func(args))
    except ValidationError as err:
        output.error(validation_text(err), args.command)
        return 2
    except RequestRejected as err:
        output.error(str(err), args.command)
        return 2 if err.usage else 1
    except (InvalidRequestError, UnknownMetricError, ExtractionError) as err:
        # What the caller gave is wrong (arguments, a metric name, a file that is no report).
        output.error(str(err), args.command)  # hints in command-line terms (cli/terms.py)
        return 2
    except NsightAgentError as err:
        output.error(str(err), args.command)
        # A setup() run without its parameters: the configs were not given (a usage error).
        return 2 if MISSING_CONFIG in str(err) else 1
    except BrokenPipeError:
        # The reader went away (`| head`): stay quiet, and keep Python's exit flush quiet too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
