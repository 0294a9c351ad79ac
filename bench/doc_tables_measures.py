"""docs/BENCHMARKS.md's tables of the suites that measure: the smallest effect, drift and the
gate, the server's speed, pre-launched targets, nsight-python beside us, section costs and
two GPUs. Each takes a suite's results file (read) and returns its blocks of markdown."""

from __future__ import annotations

from typing import Any

from bench.doc_format import cell, median, outcome, ratio, seconds, step_line, table, us


def _figures(data: dict[str, Any], step: str) -> tuple[list[str], dict[str, Any]]:
    """A one-script suite's step line and its figures ({} where it wrote none)."""
    if "skipped" in data:
        return [f"Skipped: {data['skipped']}."], {}
    return [step_line(step, data)], data.get("results") or {}


def _changed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["group"] in ("same", "side") and r["change_pct"] is not None]


def effect_size(data: dict[str, Any]) -> list[str]:
    blocks, found = _figures(data, "held_out")
    rows = []
    for call in found.get("held_out", []):
        for config in sorted({r["config"] for r in call["rows"]}):
            mine = [r for r in call["rows"] if r["config"] == config]
            same = _changed(mine)
            called = sum(r["verdict"] in ("faster", "slower") for r in same)
            bare = sum(r["intervals_only"] in ("faster", "slower") for r in same)
            worst = max((abs(r["change_pct"]) for r in same), default=None)
            slow: dict[str, Any] = next((r for r in mine if r["variant"] == "slower5"), {})
            change = slow.get("change_pct")
            said = (
                f"{change:+.2f} % {slow.get('verdict')}"
                if change is not None
                else slow.get("verdict")
            )
            rows.append(
                [
                    call["method"],
                    us(mine[0].get("base_time")),
                    f"{called} of {len(same)} / {bare}",
                    None if worst is None else f"{worst:.2f} %",
                    said,
                ]
            )
    header = [
        "method",
        "base time",
        "identical called faster/slower (rule / intervals alone)",
        "largest change of an identical",
        "5 % slower variant",
    ]
    if rows:
        blocks.append(f"The rule: min_effect_pct {found.get('default_min_effect_pct')} %.")
        blocks.append(table(header, rows))
    return blocks


def baseline_drift(data: dict[str, Any]) -> list[str]:
    blocks, found = _figures(data, "drift")
    drift = found.get("drift")
    if drift:
        rows = [
            [
                ", ".join(f"{k}={v}" for k, v in c["config"].items()),
                f"{c['rsd_pct']:.2f} %",
                f"{c['range_pct']:.2f} %",
            ]
            for c in drift["configs"]
        ]
        blocks.append(
            f"{drift['rounds']} rounds {drift['gap_s']} s apart, each on a fresh worker; the "
            f"gate allows {found.get('drift_constant')} % (DRIFT_RSD_PCT), this run suggests "
            f"{drift['suggested']} %."
        )
        blocks.append(table(["config", "RSD of the rounds' medians", "max / min - 1"], rows))
    cases = []
    for key, what in (
        ("gate_same", "the same source"),
        ("gate_slow", "a 10 % slower variant"),
        ("standin_gpu", "a run on another GPU"),
        ("ncu_rerun", "an ncu re-run"),
        ("standin_ncu", "a run with another ncu"),
    ):
        d = found.get(key)
        if isinstance(d, dict):
            verdict = (d.get("overall") or {}).get("verdict")
            reasons = "; ".join(d.get("reasons") or [])
            cases.append([what, d.get("comparable"), d.get("regression"), verdict, reasons])
    if cases:
        blocks.append(
            table(["against the baseline", "comparable", "regression", "verdict", "why"], cases)
        )
    if "failed" in found:
        failed = found["failed"]
        blocks.append(
            "Every expectation held." if not failed else "Failed: " + "; ".join(failed) + "."
        )
    return blocks


def perf(data: dict[str, Any]) -> list[str]:
    blocks, found = _figures(data, "fast_loop")
    lat = found.get("latency") or {}
    floor = median(lat.get("floor_ncu"))
    rows = [
        ["raw floor: python, torch, one kernel under ncu, one metric", floor, None],
        ["the same without ncu", median(lat.get("floor_plain")), None],
        [
            "cold profile_kernel (ncu), the floor's torch kernel, 1 config, 1 run",
            median(lat.get("cold_ncu_torch")),
            ratio(median(lat.get("cold_ncu_torch")), floor),
        ],
        [
            "cold profile_kernel (ncu), a Triton source, 1 config, 1 run",
            median(lat.get("cold_ncu")),
            ratio(median(lat.get("cold_ncu")), floor),
        ],
        ["warm profile_kernel, timing, 1 config, compiled", median(lat.get("warm_timing")), None],
        ["a server's first call (worker start, Triton compile)", found.get("warm_first_s"), None],
        [
            "timing call on a new source",
            median((found.get("new_source") or {}).get("call_s")),
            None,
        ],
        [
            "compare_variants, 4 variants x 3 configs, timing",
            median(found.get("compare_4x3_timing_s")),
            None,
        ],
        [
            "broken source on a warm server, timing",
            median((found.get("broken_s") or {}).get("timing")),
            None,
        ],
        [
            "broken source on a warm server, ncu",
            median((found.get("broken_s") or {}).get("ncu")),
            None,
        ],
    ]
    if lat:
        blocks.append(
            table(
                ["call (medians)", "seconds", "against the floor"],
                [[w, seconds(s), r] for w, s, r in rows],
            )
        )
    if found.get("gaming"):
        said = "; ".join(f"{m}: {v}" for m, v in found["gaming"].items())
        blocks.append(f"Variants that memoise by shape or hand back a stale result: {said}.")
    agree = found.get("agreement") or []
    if agree:
        blocks.append("The timing path's median against ncu's `gpu__time_duration.sum` mean:")
        blocks.append(
            table(
                ["kernel", "timing", "ncu", "ratio"],
                [
                    [
                        r["label"],
                        us(r["timing_ns"]),
                        us(r["ncu_ns"]),
                        f"{r['timing_ns'] / r['ncu_ns']:.3f}",
                    ]
                    for r in agree
                ],
            )
        )
    for phase, why in (found.get("failed") or {}).items():
        blocks.append(f"Phase `{phase}` failed: `{why.strip().splitlines()[-1]}`.")
    return blocks


PRELAUNCH_SIDES = {
    "floor": "raw floor: ncu, python, torch, one kernel, one metric",
    "cold": "profile_kernel, every ncu run cold",
    "prelaunched": "profile_kernel, pre-launched target",
    "burst": "a burst of 10 profile_kernel, pre-launched (median)",
    "triton": "profile_kernel of the diagnosed Triton kernel, pre-launched",
    "diagnose": "diagnose_kernel from source, pre-launched",
}


def prelaunch(data: dict[str, Any]) -> list[str]:
    blocks, found = _figures(data, "prelaunch")
    medians, ratios = found.get("medians_s") or {}, found.get("ratio_to_floor") or {}
    paths = found.get("paths") or {}
    rows = [
        [
            what,
            seconds(medians.get(side)),
            ratios.get(side),
            ", ".join(sorted(set(paths.get(side) or []))),
        ]
        for side, what in PRELAUNCH_SIDES.items()
        if side in medians
    ]
    first = found.get("first_call") or {}
    if rows and first:
        what = "a server's first profile_kernel, right after connecting"
        over_floor = found.get("first_call_over_floor")
        took = seconds(first.get("seconds"))
        rows.insert(1, [what, took, over_floor, str(first.get("path") or "")])
        if first.get("connect_s") is not None:  # the warm-up it waited for before answering
            what = "that server's connect: process start to initialize answered"
            rows.insert(1, [what, seconds(first["connect_s"]), None, ""])
    # The one-offs the warm-up paid before the server answered, in the order it paid them.
    paid_by = {
        "warm_up_first_ncu": "within that connect, the warm-up's ncu run of one empty kernel",
        "warm_up_first_profile": "within that connect, the warm-up's throwaway profile",
    }
    at = 2
    for key, what in paid_by.items():
        paid = first.get(key)
        if rows and paid:
            said = str(paid.get("path") or "") if paid.get("ok") else f"failed: {paid.get('why')}"
            rows.insert(at, [what, seconds(paid.get("seconds")), None, said])
            at += 1
    if rows:
        blocks.append(table(["call", "median", "of the floor", "collection"], rows))
        blocks.append(
            f"diagnose_kernel from source / a pre-launched profile of the same kernel: "
            f"{cell(found.get('diagnose_over_same_kernel'))}; the burst: "
            f"{found.get('burst_prelaunched')} pre-launched."
        )
    blocks += _first_call_stages(first, found.get("prelaunched_stages") or [])
    blocks += _first_call_steps(first.get("target_events"), found.get("later_target_events"))
    blocks += _attach_split(data.get("attach_time"))
    return blocks


def _first_call_stages(first: dict[str, Any], later: list[dict[str, Any]]) -> list[str]:
    """The server's first profile's run by stage beside the later pre-launched ones' medians
    (none before the first call's stages were kept)."""
    spent = (first.get("stages") or {}).get("run") or {}
    rows = [
        [stage, seconds(took), seconds(median([(r.get("run") or {}).get(stage) for r in later]))]
        for stage, took in spent.items()
    ]
    head = ["stage of the run", "the first profile_kernel", "a later pre-launched one (median)"]
    return [table(head, rows)] if rows else []


def _first_call_steps(
    first: list[dict[str, Any]] | None, later: list[dict[str, Any]] | None
) -> list[str]:
    """When each step of the target's run began, in seconds after the call: the first
    profile_kernel's beside a later pre-launched one's (none before the targets stamped)."""
    if not first or not later:
        return []

    def began(events: list[dict[str, Any]]) -> dict[str, float]:
        found: dict[str, float] = {}
        for e in events:
            found.setdefault(str(e.get("what")), float(e.get("t") or 0.0))
        return found

    mine, theirs = began(first), began(later)
    rows = [[what, seconds(t), seconds(theirs.get(what))] for what, t in mine.items()]
    head = ["the target's step, from the call", "the first profile_kernel", "a later one"]
    return [table(head, rows)]


def _attach_split(data: dict[str, Any] | None) -> list[str]:
    """Where a pre-launched profile's seconds go: the probe's medians (none before it ran)."""
    if not data:
        return []
    medians = (data.get("results") or {}).get("medians_s") or {}
    rows = [[what, seconds(value)] for what, value in medians.items()]
    split = [table(["a pre-launched profile_kernel, in process (median)", "seconds"], rows)]
    return [step_line("attach_time", data), *(split if rows else [])]


def peer(data: dict[str, Any]) -> list[str]:
    if "skipped" in data:
        return [f"Skipped: {data['skipped']}."]
    blocks = [step_line("sweep", data.get("sweep") or {})]
    sweep = (data.get("sweep") or {}).get("results") or {}
    if sweep.get("sizes"):
        rows = [
            [r["n"], us(r["ours_ns"]), us(r["peer_ns"]), f"{r['diff_pct']:+.2f} %"]
            for r in sweep["sizes"]
        ]
        blocks.append(
            table(["fp16 matmul n", "nsight-agent", "nsight-python 0.9.6", "difference"], rows)
        )
        walls = sweep.get("wall_s") or {}
        blocks.append(
            columns_line(sweep.get("ours_columns") or [], sweep.get("peer_columns") or [])
            + " Wall of each tool's sweep: "
            + "; ".join(f"{t} {', '.join(seconds(w) for w in ws)}" for t, ws in walls.items())
            + "."
        )
    examples = data.get("examples") or {}
    if "skipped" in examples:
        blocks.append(f"Its examples: skipped: {examples['skipped']}.")
        return blocks
    blocks.append(step_line("examples", examples))
    found = examples.get("results") or {}
    rows = []
    for name, tools in (found.get("peer") or {}).items():
        ours, theirs = median(tools.get("nsight-agent")), median(tools.get("nsight-python-0.9.6"))
        floor = median(f["total_s"] for f in (found.get("peer_floor") or {}).get(name, []))
        rows.append(
            [f"`{name}`", seconds(ours), seconds(theirs), ratio(ours, theirs), seconds(floor)]
        )
    if rows:
        header = [
            "example",
            "nsight-agent",
            "nsight-python 0.9.6",
            "ours / theirs",
            "two-process floor",
        ]
        blocks.append(table(header, rows))
    return blocks


def columns_line(ours: list[str], peer: list[str]) -> str:
    """How our DataFrame's columns stand to the peer's: its own ones missing, their order,
    and what ours adds."""
    if not ours or not peer:
        return "DataFrame columns: not recorded."
    missing = [c for c in peer if c not in ours]
    added = [c for c in ours if c not in peer]
    in_order = [c for c in ours if c in peer] == [c for c in peer if c in ours]
    said = (
        f"nsight-python 0.9.6's DataFrame columns: {len(peer) - len(missing)} of {len(peer)} "
        f"in ours, {'in its order' if in_order else 'in another order'}"
    )
    said += f"; missing: {', '.join(missing)}" if missing else ""
    return said + (f"; ours adds {', '.join(added)}." if added else ".")


def section_costs(data: dict[str, Any]) -> list[str]:
    blocks, found = _figures(data, "sections")
    rows = [
        [r["label"], r["calls"], r.get("wall_s"), r.get("ncu_s"), r.get("ncu_passes")]
        for r in found.get("rows", [])
    ]
    if rows:
        blocks.append(f"The probe kernel `{found.get('entry')}`, one cold ncu run a row:")
        blocks.append(table(["collected", "calls", "wall s", "ncu s", "replay passes"], rows))
    per_pass = (found.get("derived") or {}).get("s_per_kernel_pass")
    if per_pass is not None:
        blocks.append(f"A replay pass of one kernel: {per_pass} s.")
    return blocks


def ray(data: dict[str, Any]) -> list[str]:
    blocks, found = _figures(data, "pool")
    singles, pairs = found.get("single") or [], found.get("pair") or []
    timing = found.get("timing") or {}
    apart = found.get("pairs_on_two_gpus") or [None, None]
    rows = [
        ["first job (Ray worker start)", seconds((found.get("warmup") or {}).get("s"))],
        ["one profile_kernel alone (median)", seconds(median(s["s"] for s in singles))],
        ["two at once (median)", seconds(median(p["s"] for p in pairs))],
        ["two at once / one alone", cell(found.get("ratio_pair_single"))],
        ["pairs run on two GPUs", f"{apart[0]} of {apart[1]}"],
        ["timing path on the pool, warm call (median)", seconds(found.get("timing_warm_median_s"))],
        ["two timing calls at once", seconds((timing.get("pair") or {}).get("s"))],
    ]
    if singles or pairs:
        blocks.append(table(["what", "value"], rows))
    kernel = found.get("kernel_time") or {}
    if kernel:
        rows = [
            [n, us(k["single_ns"]), us(k["pair_ns"]), f"{k['rel_diff_pct']:+.2f} %"]
            for n, k in kernel.items()
        ]
        blocks.append(table(["n", "kernel time alone", "in a pair", "difference"], rows))
    return blocks


def kernelbench_timing(data: dict[str, Any]) -> list[str]:
    """Our KernelBench-mode speedup against KernelBench's own timing function, per problem."""
    if "skipped" in data:
        return [f"Skipped: {data['skipped']}."]
    blocks = [f"Step `timing`: {outcome(data['run'])}."] if "run" in data else []
    summary = data.get("summary") or {}
    agree = summary.get("speedup_honest") or {}
    if agree.get("n"):
        blocks.append(
            f"Speedup, ours over KernelBench's, where its timing is honest: "
            f"{agree['within_10pct']} of {agree['n']} within 10 %; median deviation "
            f"{agree['median_abs_dev_pct']} %, largest {agree['max_abs_dev_pct']} %. "
            f"GPU-time and per-call verdicts opposite in {summary.get('bases_opposite', 0)} "
            f"answer(s), said in {summary.get('bases_opposite_said', 0)}."
        )
    rows = [
        (
            r.get("level"),
            r.get("file"),
            r.get("status"),
            cell(r.get("ours_speedup")),
            cell(r.get("kb_speedup")),
            cell(r.get("speedup_ratio")),
            r.get("verdict_gpu") or "-",
            r.get("verdict_call") or "-",
        )
        for r in data.get("rows") or []
    ]
    if rows:
        headers = ["level", "problem", "status", "ours", "KernelBench", "ratio", "gpu", "call"]
        blocks.append(table(headers, rows))
    return blocks


def builds(data: dict[str, Any]) -> list[str]:
    """One build against torch's load_inline; four calls building at once against one."""
    blocks, found = _figures(data, "builds")
    build, calls = found.get("build") or {}, found.get("calls") or {}
    rows = [
        (
            name,
            seconds((build.get(name) or {}).get("seconds")),
            cell(build[name].get("ratio_to_torch")),
        )
        for name in ("torch_default", "ours_cold", "ours")
        if isinstance(build.get(name), dict)
    ]
    if rows:
        blocks.append(table(["one build", "seconds", "of torch's (target <= 0.7)"], rows))
    if calls:
        alone, four = calls.get("alone") or {}, calls.get("four_at_once") or {}
        blocks.append(
            f"Four calls with a load_inline candidate each: {seconds(four.get('wall_s'))} against "
            f"{seconds(alone.get('wall_s'))} for one alone, {cell(calls.get('ratio'))}x "
            "(target <= 1.5x)."
        )
    return blocks


def gate_under_load(data: dict[str, Any]) -> list[str]:
    """The exit codes each kind of check gave, and whether an unchanged source ever failed."""
    if "skipped" in data:
        return [f"Skipped: {data['skipped']}."]
    codes = data.get("exit_codes") or {}
    run = [step_line("gate", {**data, "results": codes or None})] if "run" in data else []
    if not codes:
        return run or ["It wrote no figures."]
    rows = [
        (kind, ", ".join(f"exit {c}: {n}" for c, n in sorted(seen.items())))
        for kind, seen in codes.items()
    ]
    never = data.get("never_exit_1_unchanged_under_load")
    load = data.get("load_average_1min")
    blocks = [
        *run,
        f"An unchanged source under load never exited 1: {never}. "
        f"Load average (1 min) during the checks: {load}.",
    ]
    if rows:
        blocks.append(table(["checks", "exit codes"], rows))
    return blocks
