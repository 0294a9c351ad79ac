"""``nsight-agent compare``: variants of one source (``--variant NAME=ENTRY``) or sources of
their own (``--candidate FILE``: a KernelBench ``ModelNew`` against its problem's ``Model``),
as a comparison table, JSON, or KernelBench's result fields (``--kernelbench-result``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import nsight_agent.cli.output as output
from nsight_agent.cli.commands import dump_json, measure_source
from nsight_agent.cli.inputs import kernel_source, parse_configs, source_files
from nsight_agent.errors import InvalidRequestError, RequestRejected


def compare_variants(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """``--variant NAME[=ENTRY]`` of the shared source, then each ``--candidate FILE`` with its
    own source (a KernelBench problem's "ref" first when candidates come alone); and the file
    each candidate came from, by its variant's name."""
    variants = []
    for item in args.variant or []:
        name, _, entry = item.partition("=")
        variants.append({"name": name.strip(), "entry": (entry or name).strip()})
    if args.candidate and not variants:
        variants.append({"name": "ref"})
    taken = {v["name"] for v in variants}
    files: dict[str, str] = {}
    for item in args.candidate or []:
        file = Path(item)
        name = file.stem
        while name in taken:
            name += "_"
        taken.add(name)
        variants.append({"name": name, "source": kernel_source(file, "compare")})
        files[name] = item
    if len(variants) < 2:
        raise InvalidRequestError(
            "compare needs at least two --variant NAME[=ENTRY], or --candidate FILE.",
            "Example: --variant eager=run_ref --variant fused=run; for a KernelBench problem: "
            "nsight-agent compare PROBLEM.py --candidate SOLUTION.py",
        )
    return variants, files


def cmd_compare(args: argparse.Namespace) -> int:
    import nsight_agent.cli.tables as tables
    from nsight_agent.service import summaries
    from nsight_agent.views import runs, text
    from nsight_agent.views.kernelbench import (
        kernelbench_report,
        rejected_report,
        render_kernelbench,
    )

    path = Path(args.file)
    source = kernel_source(path, "compare")
    variants, candidates = compare_variants(args)
    correctness = args.correctness or ("kernelbench" if args.kernelbench_result else None)
    baseline = args.baseline or variants[0]["name"]
    try:
        run = measure_source(
            args.method,
            f"comparing {len(variants)} variants of {path.name}",
            args.runs_root,
            files=source_files(args.file, candidates),
            source=source,
            language=args.language,
            variants=variants,
            baseline=baseline,
            configs=parse_configs(args.config, args.grid),
            runs=args.runs,
            timeout_s=args.timeout,
            clock_control=args.clock_control,
            correctness=correctness,
            min_effect_pct=args.min_effect,
            time_basis=args.time_basis,
            num_correct_trials=args.num_correct_trials,
            num_perf_trials=args.num_perf_trials,
        )
    except RequestRejected as err:
        if not (args.kernelbench_result and err.candidates_only):
            raise
        # Every candidate failed to build: KernelBench's answer is compiled=False for each,
        # an evaluation that completed (exit 0), not an error.
        report = rejected_report(err.problems, baseline)
        print(dump_json(report) if args.json else render_kernelbench(report))
        return 0
    s = summaries.compare_summary(run, baseline=args.baseline, limit=10_000)
    if args.kernelbench_result:
        report = s.kernelbench or kernelbench_report(s)
        print(dump_json(report) if args.json else render_kernelbench(report))
    elif args.json:
        print(dump_json(s))
    else:
        label = runs.metric_labels(run)
        output.show(text.render_compare(s, label), tables.compare(s, label))
    return 0
