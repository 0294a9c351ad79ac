"""``nsight-agent compare``: variants of one source (``--variant NAME=ENTRY``) or sources of
their own (``--candidate FILE``: a KernelBench ``ModelNew`` against its problem's ``Model``),
as a comparison table, JSON, or KernelBench's result fields (``--kernelbench-result``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import nsight_agent.cli.output as output
from nsight_agent.cli.commands import (
    dump_json,
    kernel_source,
    measure_source,
    parse_configs,
)
from nsight_agent.errors import InvalidRequestError


def compare_variants(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``--variant NAME[=ENTRY]`` of the shared source, then each ``--candidate FILE`` with its
    own source (a KernelBench problem's "ref" first when candidates come alone)."""
    variants = []
    for item in args.variant or []:
        name, _, entry = item.partition("=")
        variants.append({"name": name.strip(), "entry": (entry or name).strip()})
    if args.candidate and not variants:
        variants.append({"name": "ref"})
    taken = {v["name"] for v in variants}
    for item in args.candidate or []:
        file = Path(item)
        name = file.stem
        while name in taken:
            name += "_"
        taken.add(name)
        variants.append({"name": name, "source": kernel_source(file, "compare")})
    if len(variants) < 2:
        raise InvalidRequestError(
            "compare needs at least two --variant NAME[=ENTRY], or --candidate FILE.",
            "Example: --variant eager=run_ref --variant fused=run; for a KernelBench problem: "
            "nsight-agent compare PROBLEM.py --candidate SOLUTION.py",
        )
    return variants


def cmd_compare(args: argparse.Namespace) -> int:
    import nsight_agent.cli.tables as tables
    from nsight_agent.service import summaries
    from nsight_agent.views import runs, text
    from nsight_agent.views.kernelbench import kernelbench_report, render_kernelbench

    path = Path(args.file)
    source = kernel_source(path, "compare")
    variants = compare_variants(args)
    correctness = args.correctness or ("kernelbench" if args.kernelbench_result else None)
    run = measure_source(
        args.method,
        f"comparing {len(variants)} variants of {path.name}",
        source=source,
        language=args.language,
        variants=variants,
        baseline=args.baseline or variants[0]["name"],
        configs=parse_configs(args.config, args.grid),
        runs=args.runs,
        timeout_s=args.timeout,
        clock_control=args.clock_control,
        correctness=correctness,
        min_effect_pct=args.min_effect,
    )
    s = summaries.compare_summary(run, baseline=args.baseline, limit=10_000)
    if args.kernelbench_result:
        report = kernelbench_report(s)
        print(dump_json(report) if args.json else render_kernelbench(report))
    elif args.json:
        print(dump_json(s))
    else:
        label = runs.metric_labels(run)
        output.show(text.render_compare(s, label), tables.compare(s, label))
    return 0
