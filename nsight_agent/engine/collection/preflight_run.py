"""The pre-flight: the harness run once without ncu (on the CPU when there is no GPU), and
the rule that no exit status is trusted: a harness passed only when its manifest holds every
(config, variant, run). Broken sources become ``SourceError`` with stage and line.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nsight_agent.engine import process
from nsight_agent.engine.collection import call_rows
from nsight_agent.engine.harness.errors import DIED, SourceError
from nsight_agent.engine.store.records import (
    DroppedVariant,
    DropVerdict,
    dropped_from,
    suspects_from,
)
from nsight_agent.engine.store.run_status import tag_run
from nsight_agent.engine.store.runs import OutputCheck, PreflightResult
from nsight_agent.errors import CollectionTimeoutError
from nsight_agent.request import ProfileRequest

# Check failures that make the outputs incomparable: profiling such a variant is pointless.
STRUCTURAL_REASONS = frozenset({"shape", "dtype", "structure", "alias"})
PREFLIGHT_PREFIX = "preflight-"


def run_preflight(
    run_dir: Path,
    request: ProfileRequest,
    device: str,
    poll: Callable[[], None] | None,
    *,
    skip: Sequence[str] = (),
    prefix: str = PREFLIGHT_PREFIX,
) -> PreflightResult:
    """The harness once, in a new process; ``skip``: variants left out; ``prefix``: the
    names of the files it leaves (another prefix keeps an earlier pre-flight's files)."""
    env = {"NSIGHT_AGENT_PREFLIGHT": "1"}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # Triton kernels run on CPU tensors in the interpreter
    output = run_dir / f"{prefix}output.log"
    argv = [process.python_executable(), "harness.py", "--preflight", "--device", device]
    argv += ["--prefix", prefix] + (["--skip", ",".join(skip)] if skip else [])
    try:
        done = process.run_to_file(
            argv,
            output_path=output,
            timeout=request.timeout_s,
            cwd=run_dir,
            env=process.child_env(env),
            poll=poll,
            tag=f"{run_dir.name}.{prefix.strip('-')}",
        )
    except process.RunTimeout:
        raise CollectionTimeoutError(
            f"The pre-flight ran past its {request.timeout_s:g} s limit and was killed.",
            f"A kernel or the setup may hang; its output so far is in {output}.",
        ) from None
    return result_from_files(run_dir, request, device, done.returncode, done.seconds, prefix=prefix)


def result_from_files(
    run_dir: Path,
    request: ProfileRequest,
    device: str,
    returncode: int,
    seconds: float,
    warm: bool = False,
    prefix: str = PREFLIGHT_PREFIX,
) -> PreflightResult:
    """What a pre-flight left in ``run_dir`` (manifest, error file, output) as its result,
    however the harness was run (a new interpreter here, a warm worker in engine/worker/pool.py);
    the result is also written next to them."""
    found = read_manifest(run_dir / f"{prefix}manifest.json")
    manifest = found or {}
    result = PreflightResult(
        ok=True,
        device=device,
        seconds=seconds,
        checks=[OutputCheck(**c) for c in manifest.get("checks", [])],
        kernels_per_call=_kernels_per_call(manifest),
        kernel_counts=kernel_counts(manifest),
        copies_ns=copies_per_config(manifest),
        call_ns=call_rows.samples_of(manifest.get("call_ns")),
        kernelbench_ns=call_rows.samples_of(manifest.get("kernelbench_ns")),
        notes=list(manifest.get("notes", [])),
        warm=warm,
        cuda_build=manifest.get("cuda_build"),
        builds=list(manifest.get("builds") or []),
        dropped=dropped_from(manifest.get("dropped")),
        suspects=suspects_from(manifest.get("suspects")),
    )
    if returncode != 0:
        output = run_dir / f"{prefix}output.log"
        tail = output.read_text(errors="replace")[-4000:] if output.exists() else ""
        err = source_error(run_dir / f"{prefix}error.json", tail, returncode)
        result.ok, result.stage, result.line = False, err.stage, err.line
        result.harness_failed = True
        result.errors.append(err.message)
    else:
        variants = [v.name for v in request.effective_variants()]
        configs = len(request.expanded_configs())
        early = early_exit(found, variants, configs, min(request.runs, 2), 0)
        if early is not None:
            result.ok, result.stage = False, early.stage
            result.errors.append(early.message)
        else:
            _add_check_errors(result, manifest, request.baseline_name())
    (run_dir / f"{prefix}result.json").write_text(result.model_dump_json(indent=1))
    return result


def read_manifest(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def early_exit(
    manifest: dict[str, Any] | None,
    variants: Sequence[str],
    configs: int,
    runs: int,
    returncode: int,
) -> SourceError | None:
    """Trust no exit status: the harness passed only if its manifest holds every call
    (``configs`` x ``variants`` x ``runs``). An ``os._exit`` at import or in the entry leaves
    it short."""
    said = f"the harness exited with status {returncode} but"
    if manifest is None:
        return SourceError(
            "import",
            f"{said} wrote no manifest: the process ended while your module was imported "
            "(os._exit(), or a signal, at import time?) before setup ran",
        )
    if any("not run" in str(n) for n in manifest.get("notes", [])):
        return None  # entries deliberately not run (CUDA compiled only, no GPU)
    gone = set(manifest.get("skipped") or []) | set(manifest.get("dropped") or {})
    left = [v for v in variants if v not in gone]
    expected = configs * len(left) * runs
    done = {  # (variant, config, run) triples; a call may cover several annotations
        (name, c.get("config"), c.get("run"))
        for c in manifest.get("calls", [])
        for name in ([c["variant"]] if "variant" in c else c.get("annotations", []))
    }
    got = len(done)
    if got >= expected:
        return None
    per_config = len(left) * runs
    config, variant = got // per_config, left[(got % per_config) // runs]
    # The manifest is written at each config's start and end: it places the exit within a
    # config, and within a variant only where one variant is left.
    known = variant if len(left) == 1 else None
    return SourceError(
        "entry",
        f"{said} recorded only {got} of {expected} measured calls: the process ended early "
        f"(os._exit() in setup, a first call or the entry?) in config #{config}",
        variant=known,
        config_index=config,
    )


def _add_check_errors(result: PreflightResult, manifest: dict[str, Any], baseline: str) -> None:
    """Wrong outputs and kernel counts. A variant other than the baseline with outputs of the
    wrong structure, no kernel or a changing kernel count is dropped with its verdict (not
    measured, the others are); wrong values alone are measured and flagged. The baseline's
    own failures end the run: nothing can be compared without it."""
    checks = result.checks
    for c in checks:
        if not c.ok and c.reason in STRUCTURAL_REASONS and c.variant != baseline:
            result.dropped.setdefault(
                c.variant,
                DroppedVariant(
                    verdict="incorrect",
                    stage="check",
                    message=c.message,
                    config_index=c.config_index,
                    reason=c.reason,
                ),
            )
    errors = [
        f"variant {c.variant!r}, config #{c.config_index}: {c.message}" for c in checks if not c.ok
    ]
    wrong = {c.variant: c for c in checks if not c.ok}
    for variant, config, verdict, message in _kernel_count_errors(manifest):
        errors.append(f"variant {variant!r}, config #{config}: {message}")
        if variant in wrong and variant != baseline:  # wrong values are the stronger truth
            check = wrong[variant]
            verdict, config = "incorrect", check.config_index
            message = f"{check.message}; and {message[:1].lower()}{message[1:]}"
        if variant != baseline:
            stage = "check" if verdict == "incorrect" else "entry"
            detail = DroppedVariant(
                verdict=verdict, stage=stage, message=message, config_index=config
            )
            result.dropped.setdefault(variant, detail)
        else:
            result.stage = "entry"
    errors += [
        f"variant {name!r}: {d.verdict} at {d.stage}: {d.message}"
        for name, d in result.dropped.items()
        if d.stage != "check" and not any(name in e for e in errors)
    ]
    if errors:
        result.ok, result.errors = False, errors
        if result.stage is None:
            result.stage = "check" if any(not c.ok for c in checks) else "variant"


def _kernels_per_call(manifest: dict[str, Any]) -> dict[str, list[list[str]]] | None:
    calls = manifest.get("calls", [])
    if not calls or any(c.get("kernels") is None for c in calls):
        return None  # counted only on a GPU
    out: dict[str, list[list[str]]] = {}
    for c in calls:
        out.setdefault(c["variant"], []).append(list(c["kernels"]))
    return out


def kernel_counts(manifest: dict[str, Any]) -> dict[str, dict[int, int]]:
    """Per variant and config, the number of kernels each measured call launched, where every
    run of that config launched the same number (counted only on a GPU)."""
    out: dict[str, dict[int, int]] = {}
    for (variant, config), counts in _counts_seen(manifest).items():
        by_config = out.setdefault(variant, {})
        if len(counts) == 1:
            by_config[config] = next(iter(counts))
    return out


def _counts_seen(manifest: dict[str, Any]) -> dict[tuple[str, int], set[int]]:
    """Per (variant, config), the kernel counts its measured calls launched (GPU only)."""
    seen: dict[tuple[str, int], set[int]] = {}
    for c in manifest.get("calls", []):
        if c.get("kernels") is not None:
            seen.setdefault((c["variant"], c["config"]), set()).add(len(c["kernels"]))
    return seen


def expected_kernels(pre: PreflightResult) -> dict[tuple[str, int], int]:
    """``kernel_counts`` by (variant, config index): what call markers must bracket."""
    return {(v, cfg): n for v, by in pre.kernel_counts.items() for cfg, n in by.items()}


def copies_per_config(manifest: dict[str, Any]) -> dict[str, dict[int, float]]:
    """Per variant and config, the median GPU time of its measured calls' copies and memsets
    (ns), where it is above zero; counted only on a GPU."""
    times: dict[tuple[str, int], list[float]] = {}
    for c in manifest.get("calls", []):
        if isinstance(c.get("copies_ns"), int | float):
            times.setdefault((c["variant"], c["config"]), []).append(float(c["copies_ns"]))
    out: dict[str, dict[int, float]] = {}
    for (variant, config), values in times.items():
        median = statistics.median(values)
        if median > 0:
            out.setdefault(variant, {})[config] = median
    return out


def _kernel_count_errors(manifest: dict[str, Any]) -> list[tuple[str, int, DropVerdict, str]]:
    """Runs of one (variant, config) must launch the same kernels, and at least one:
    (variant, config, verdict, message) for each that does not."""
    errors: list[tuple[str, int, DropVerdict, str]] = []
    for (variant, config), counts in _counts_seen(manifest).items():
        if len(counts) > 1:
            errors.append(
                (
                    variant,
                    config,
                    "suspect",
                    f"the number of kernels changes between runs ({sorted(counts)}); warm up "
                    "autotuners/caches in the first call or use replay_mode='range'",
                )
            )
        elif counts == {0}:
            errors.append((variant, config, *_no_kernel(manifest, variant, config)))
    return errors


def _no_kernel(manifest: dict[str, Any], variant: str, config: int) -> tuple[DropVerdict, str]:
    """The verdict of a (variant, config) whose measured calls launched no kernel: ``suspect``
    when its first call launched some (it returns what that call computed), else
    ``no_kernel``."""
    firsts = manifest.get("first_kernels") or []
    first = firsts[config].get(variant, 0) if config < len(firsts) else 0
    if first:
        return (
            "suspect",
            f"its first call launched {first} kernel(s) and its measured calls none: it "
            "returns a result kept from an earlier call, so its time is not its work's",
        )
    return (
        "no_kernel",
        "the entry launched no CUDA kernel (are the tensors on the GPU? does it return a "
        "cached result?)",
    )


def broken_run(pre: PreflightResult) -> bool:
    """The run itself broke: the source does not import, setup or the baseline fails (its
    outputs invalid too: the harness ends with an error at stage check). A variant that
    failed alone (``pre.dropped``, or wrong values, measured and flagged) does not."""
    return not pre.ok and (pre.harness_failed or pre.stage not in ("check", "variant"))


def raise_if_broken(pre: PreflightResult) -> None:
    """Raise SourceError when the run itself is broken (``broken_run``)."""
    if not broken_run(pre):
        return
    message = "\n".join(pre.errors) or "the pre-flight run failed"
    err = SourceError(pre.stage or "entry", message, line=pre.line)
    raise tag_run(err, pre.run_id) if pre.run_id else err


def source_error(error_file: Path, output_tail: str, returncode: int | None = None) -> SourceError:
    if error_file.exists():
        try:
            return SourceError.from_json(json.loads(error_file.read_text()))
        except (ValueError, TypeError):
            pass
    status = f" (exit status {returncode})" if returncode is not None else ""
    tail = f"\n{output_tail}" if output_tail.strip() else ""  # nothing printed: no blank line
    return SourceError(
        "entry",
        f"{DIED}{status}: a crash in native code, a signal, or os._exit() in your source?{tail}",
    )
