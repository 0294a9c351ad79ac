"""The commands of baselines (docs/BASELINES.md): ``baseline`` names runs, ``diff`` compares
two runs, ``check`` is the regression gate for CI, ``history`` lists one kernel's trend.

``check`` exits 0 (no regression), 1 (regression: the table says where), 2 (usage: bad
arguments, an unknown baseline) or 3 (not comparable: the reasons and what to do).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import nsight_agent.cli.output as output
from nsight_agent.cli.inputs import kernel_source, source_files
from nsight_agent.errors import InvalidRequestError
from nsight_agent.stages import VALIDATION

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, EXIT_NOT_COMPARABLE = 0, 1, 2, 3


def _root(args: argparse.Namespace) -> Path | None:
    return Path(args.runs_root) if getattr(args, "runs_root", None) else None


def _threshold(value: float | None) -> float | None:
    if value is not None and value < 0:
        raise InvalidRequestError(f"--threshold must be >= 0 (a percentage); got {value}.")
    return value


def cmd_baseline(args: argparse.Namespace) -> int:
    from nsight_agent.service import baselines as baseline_store

    root = _root(args)
    if args.action == "list":
        found = baseline_store.list_baselines(root)
        if args.json:
            print(json.dumps([b.model_dump(exclude={"checks"}) for b in found], indent=1))
            return EXIT_OK
        for b in found:
            print(
                f"{b.name:16} {b.run_id} [{b.variant}] source {b.source_hash} "
                f"{b.gpu or '?'} {b.method or '?'} measured {b.measured or '?'}"
            )
        if not found:
            print("no baselines yet: nsight-agent baseline set NAME RUN_ID", file=sys.stderr)
        return EXIT_OK
    if not args.name:
        raise InvalidRequestError(f"baseline {args.action} needs a NAME.")
    if args.action == "remove":
        gone = baseline_store.remove_baseline(args.name, root)
        print(f"removed baseline {gone.name} (run {gone.run_id} is kept until retention)")
        return EXIT_OK
    if not args.run_id:
        raise InvalidRequestError(
            "baseline set needs a NAME and a RUN_ID: nsight-agent baseline set main RUN_ID"
        )
    b = baseline_store.set_baseline(args.name, args.run_id, args.variant, root)
    print(f"baseline {b.name} = run {b.run_id} [{b.variant}], {b.method} on {b.gpu or '?'}")
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    """Exit 0 when the runs were compared (whatever the verdict), 3 when not comparable."""
    from nsight_agent.service import baselines as baseline_store
    from nsight_agent.views.common import dump
    from nsight_agent.views.run_diff import render_diff

    d = baseline_store.diff(args.run, args.against, _root(args), _threshold(args.threshold))
    print(json.dumps(dump(d), indent=1) if args.json else render_diff(d))
    return EXIT_OK if d.comparable else EXIT_NOT_COMPARABLE


def cmd_check(args: argparse.Namespace) -> int:
    from nsight_agent.service import baselines as baseline_store
    from nsight_agent.views.common import dump
    from nsight_agent.views.run_diff import render_diff

    path = Path(args.file)
    source = kernel_source(path, "check")
    with output.progress(f"checking {path.name} against baseline {args.baseline!r}") as progress:
        progress(0, 0, VALIDATION)
        checked = baseline_store.check_source(
            source,
            args.baseline,
            entry=args.entry,
            threshold_pct=_threshold(args.threshold),
            remeasure=args.remeasure,
            runs_root=_root(args),
            files=source_files(args.file),
            on_progress=progress,
        )
    d, both = checked.diff, checked.remeasured
    if both is not None:  # not comparable, measured again side by side
        if args.json:
            print(json.dumps({"diff": dump(d), "remeasured": dump(both)}, indent=1))
        else:
            print(render_diff(d))
            print(f"\nre-measured both in run {both.run_id} (within one run):")
            for c in both.configs:
                v = c.variants["candidate"]
                print(f"  config #{c.config_index} {c.config}: {v.verdict} speedup {v.speedup}")
            print(f"regression: {checked.regression}")
        return EXIT_REGRESSION if checked.regression else EXIT_OK
    print(json.dumps(dump(d), indent=1) if args.json else render_diff(d))
    if not d.comparable:
        return EXIT_NOT_COMPARABLE
    return EXIT_REGRESSION if checked.regression else EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    from nsight_agent.service import baselines as baseline_store
    from nsight_agent.views.common import dump
    from nsight_agent.views.history import plot_history, render_history

    h = baseline_store.history(args.key, _root(args), limit=args.limit)
    print(json.dumps(dump(h), indent=1) if args.json else render_history(h))
    if args.plot:
        plot_history(h, args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)
    return EXIT_OK
