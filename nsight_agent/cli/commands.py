"""The commands of ``nsight-agent``: each parses nothing, calls the service layer, prints
(``cli/output.py``: tables on a terminal, plain text in a pipe, ``--json`` as it was)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import nsight_agent.cli.output as output
from nsight_agent.cli.inputs import (
    is_report,
    kernel_source,
    metrics_of,
    parse_configs,
    source_files,
)
from nsight_agent.errors import InvalidRequestError
from nsight_agent.stages import VALIDATION

DIAGNOSE_TAKES = (
    "diagnose takes a .ncu-rep, a kernel source file (profiled under ncu), or the id of an "
    "earlier run (`nsight-agent runs` lists them; --runs-root for another runs folder)."
)


def _is_run(name: str, root: Path | None) -> bool:
    from nsight_agent.service import runs as run_store

    return run_store.is_run(name, root)


def dump_json(model: Any) -> str:
    from nsight_agent.views import common

    return json.dumps(common.dump(model), indent=1)


# ---------------------------------------------------------------------------------------------
# Commands


def cmd_profile(args: argparse.Namespace) -> int:
    import nsight_agent.cli.tables as tables
    from nsight_agent.service import summaries
    from nsight_agent.views import runs, text

    path = Path(args.file)
    run = measure_source(
        args.method,
        f"profiling {path.name}",
        args.runs_root,
        files=source_files(args.file),
        source=kernel_source(path, "profile"),
        language=args.language,
        entry=args.entry,
        configs=parse_configs(args.config, args.grid),
        metrics=metrics_of(args.metrics),
        skill=args.skill,
        runs=args.runs,
        timeout_s=args.timeout,
        clock_control=args.clock_control,
        correctness=args.correctness,
    )
    s = summaries.profile_summary(run, limit=10_000)
    if args.json:
        print(dump_json(s))
        return 0
    label = runs.metric_labels(run)
    output.show(text.render_table(s, label), tables.profile(s, label))
    print(f"\nrun {run.run_id}: artifacts in {run.run_dir}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    import nsight_agent.cli.tables as tables
    from nsight_agent.service import summaries
    from nsight_agent.views import text

    options: dict[str, Any] = {"offset": args.offset, "limit": args.limit}
    options |= {"findings": args.findings, "metrics": metrics_of(args.metrics)}
    if args.json:
        print(dump_json(summaries.report_summary(args.file, **options)))
        return 0
    s, step_view = summaries.report_and_step(args.file, **options)
    # The whole step first, when the report holds several groups.
    step = text.step_lines(step_view)
    if step:
        output.show("\n".join(step))
    output.show(text.render_report(s), tables.report(s))
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    # A file that is neither a report nor text is refused before anything heavy is imported;
    # one that is not Python, by the validation stage (before any run folder exists).
    path = Path(args.file) if args.file else None
    root = Path(args.runs_root) if args.runs_root else None
    run_id, source = args.run_id, None
    if not run_id:
        if path is None:
            raise InvalidRequestError(
                "Give a .ncu-rep, a kernel source file, or a run id.", DIAGNOSE_TAKES
            )
        if not path.exists() and _is_run(args.file, root):
            run_id = args.file
        elif not path.exists():
            raise InvalidRequestError(f"No file or run at {path}.", DIAGNOSE_TAKES)
        elif not (path.is_file() and is_report(path)):
            source = kernel_source(path, "diagnose")

    import nsight_agent.cli.tables as tables
    from nsight_agent.service import diagnose
    from nsight_agent.service import runs as run_store
    from nsight_agent.service.measure import Measuring
    from nsight_agent.views import text

    if source is None:  # a report or a run is read as it is: a flag of a new run would be ignored
        given = {"--config": args.config, "--grid": args.grid, "--language": args.language}
        given |= {"--entry": args.entry != "run", "--timeout": args.timeout != 900}
        given |= {"--no-deep": args.no_deep}
        ignored = [flag for flag, value in given.items() if value]
        if ignored:
            raise InvalidRequestError(
                f"{', '.join(ignored)}: only a kernel source is profiled; "
                f"{'run ' + run_id if run_id else str(path)} is read as it was measured.",
                f"Drop {', '.join(ignored)}, or give the kernel's source file to profile it anew.",
            )
    options = {"ideal_bytes": args.ideal_bytes, "input_dtypes": args.input_dtype}
    if run_id:
        page = {"offset": args.offset, "limit": args.limit}
        d = diagnose.diagnose_run(run_id, runs_root=root, **page, **options)
    elif source is None:
        assert path is not None
        d = diagnose.diagnose_file(path, offset=args.offset, limit=args.limit, **options)
    else:
        assert path is not None
        fields: dict[str, Any] = {
            "source": source,
            "language": args.language,
            "entry": args.entry,
            "configs": parse_configs(args.config, args.grid),
            "timeout_s": args.timeout,
        }
        with output.progress(f"diagnosing {path.name} under ncu") as progress:
            progress(0, 0, VALIDATION)
            where = Measuring(runs_root=root, on_progress=progress)
            d = diagnose.diagnose_source(
                fields,
                where,
                deep=not args.no_deep,
                offset=args.offset,
                limit=args.limit,
                files=source_files(args.file),
                **options,
            )
        if d.run_id:
            named(run_store.runs_root_or_default(root) / d.run_id, source_files(args.file))
    if args.json:
        print(dump_json(d))
    else:
        output.show(text.render_diagnosis(d), tables.diagnosis(d))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Exit 0 only when this machine can profile; otherwise say why and exit 1."""
    import nsight_agent.cli.tables as tables
    from nsight_agent.service import session
    from nsight_agent.views import device as device_views

    info = session.device_info(probe=args.probe)
    if args.json:
        print(info.model_dump_json(indent=1))
    else:
        install = device_views.install_lines(info)
        output.show(device_views.render_device(info), tables.doctor(info, install))
    if info.can_profile:
        return 0
    why = "; ".join(info.unknown[:3]) or "no usable GPU with ncu and counter access"
    print(
        f"\ncannot profile here: {why}. Reports can still be read (nsight-agent report "
        "FILE.ncu-rep); profiling needs an NVIDIA GPU, its driver, and Nsight Compute (ncu) "
        "with counter access.",
        file=sys.stderr,
    )
    return 1


def cmd_metrics(args: argparse.Namespace) -> int:
    from rich.table import Table

    from nsight_agent.catalog import metrics as catalog
    from nsight_agent.catalog.search import close_names, search_metrics

    query = " ".join(args.query)
    found = search_metrics(query, args.limit)
    table = Table("metric", "type", "unit", "description", header_style="bold", pad_edge=False)
    for m in found:
        table.add_row(m.example, m.type, m.unit or "", m.description)
    plain = "\n".join(f"{m.example}  ({m.type}, {m.unit or '-'}): {m.description}" for m in found)
    if found:
        output.show(plain, table)
    else:
        close = close_names(query)
        offer = f"; close: {', '.join(close)}" if close else ""
        print(f"no metric matches {query!r}{offer}", file=sys.stderr)
    print(f"[{catalog.catalog_source().label}]", file=sys.stderr)
    return 0 if found else 1


def cmd_skills(args: argparse.Namespace) -> int:
    from rich.table import Table

    from nsight_agent.catalog import skills

    if args.name:
        print(skills.get_skill(args.name).skill_md)
        return 0
    table = Table("skill", "what it is for", header_style="bold", pad_edge=False)
    bundles = skills.list_skills()
    for b in bundles:
        table.add_row(b.name, b.description)
    output.show("\n".join(f"{b.name:14} {b.description}" for b in bundles), table)
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    from nsight_agent.service import runs as run_store

    root = Path(args.runs_root) if args.runs_root else None
    if args.action == "list":
        import nsight_agent.cli.tables as tables
        from nsight_agent.views.run_list import render_runs

        rows = run_store.run_rows(root, limit=args.limit)
        where = run_store.runs_root_or_default(root)
        if not output.rich_stdout():
            print(f"# {where}", file=sys.stderr)
        output.show(render_runs(rows), tables.runs_list(str(where), rows))
    elif args.action == "show":
        if not args.run_id:
            raise InvalidRequestError("runs show needs a run id: nsight-agent runs show RUN_ID")
        return show_run(args.run_id, root, offset=args.offset, limit=args.limit)
    else:
        pruned = run_store.prune_runs(root, keep=args.keep, max_gb=args.max_gb)
        print(f"removed {len(pruned.removed)} run(s), {pruned.freed_bytes / 1e6:.1f} MB")
    return 0


def show_run(run_id: str, root: Path | None, *, offset: int = 0, limit: int = 50) -> int:
    """A kept run: its table, or (a run that did not pass) its failure, exit 1."""
    import nsight_agent.cli.tables as tables
    from nsight_agent.service import runs as run_store
    from nsight_agent.service import summaries
    from nsight_agent.views import runs, text

    run = run_store.load_run(run_id, root)
    s = summaries.profile_summary(run, offset=offset, limit=limit)
    status = run.status
    if status != "passed":
        failure = dict(run.failure or {}) | {"status": status}
        plain = f"run {run_id} {status.upper()} at {failure.get('stage')}: {failure.get('message')}"
        rest = [w for w in s.warnings or [] if run_id not in w]
        output.show(
            "\n".join([plain, *(f"warning: {w}" for w in rest)]),
            tables.failed_run(run_id, failure, rest),
        )
        return 1
    label = runs.metric_labels(run)
    output.show(text.render_profile(s, label), tables.profile(s, label))
    return 0


def measure_source(method: str, stage: str, runs_root: str | None = None, **fields: Any) -> Any:
    """The request of ``fields`` under ncu, or (``--method timing``) timed on a warm worker
    started for this command, its run kept under ``runs_root`` (None: the default folder); its
    stages on stderr (a spinner, or lines in a pipe)."""
    from nsight_agent.service import profile
    from nsight_agent.service.measure import Measuring

    root = Path(runs_root) if runs_root else None
    how = ": timing (warm worker, no ncu)" if method == "timing" else " under ncu"
    with output.progress(stage + how) as progress:
        progress(0, 0, VALIDATION)
        where = Measuring(runs_root=root, on_progress=progress)
        run = profile.profile(where, "timing" if method == "timing" else "ncu", **fields)
    named(run.run_dir, fields.get("files"))
    return run


def named(run_dir: Path, files: dict[str, str] | None) -> None:
    """The run records the name of the file it profiled (``runs`` lists it)."""
    from nsight_agent.service import runs as run_store

    if files and files.get(""):
        run_store.name_source(run_dir, Path(files[""]).name)


def cmd_serve(args: argparse.Namespace) -> int:
    from nsight_agent.server.app import serve
    from nsight_agent.service.session import warm_wait_s

    warm_wait_s()  # a bad NSIGHT_AGENT_WARM_WAIT_S is said before anything starts

    if args.transport == "stdio" and sys.stdin.isatty():
        print(
            "nsight-agent serve: an MCP server on stdio, waiting for an MCP client (this is "
            "not an interactive prompt). Configure your agent to run `nsight-agent serve`; "
            "press Ctrl-C to quit.",
            file=sys.stderr,
        )

    serve(
        args.transport,
        host=args.host,
        port=args.port,
        runs_root=Path(args.runs_root) if args.runs_root else None,
        executor=args.executor,
        ray_address=args.ray_address,
        token_file=Path(args.token_file) if args.token_file else None,
        allow_dirs=tuple(Path(d) for d in args.allow_dir),
        allowed_hosts=tuple(args.allow_host),
        allowed_origins=tuple(args.allow_origin),
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from nsight_agent import demo

    return demo.main([])
