"""Named baselines of the run store, and the environment a run was measured in.

A baseline names one variant of one kept run (``.baselines.json`` in the runs folder, written
atomically under a lock); retention never removes a run a baseline names. A run's
``environment.json`` records what the run itself does not: driver, ncu and torch versions,
the GPU list, the host. docs/BASELINES.md says how both are used to compare runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from nsight_agent.engine import children
from nsight_agent.engine.store import runs
from nsight_agent.engine.store.run_status import HOST, read_status, storage_errors, write_atomic
from nsight_agent.errors import InvalidRequestError
from nsight_agent.request import ProfileRequest

BASELINES_FILE = ".baselines.json"
ENVIRONMENT_FILE = "environment.json"
# Runs checked against one baseline that its history remembers (oldest dropped first).
CHECKS_KEPT = 100
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class Baseline(BaseModel):
    """One name for one variant of one run, with what its listing shows."""

    name: str
    run_id: str
    variant: str
    created: str = Field(description="When the name was given (UTC, ISO 8601)")
    source_hash: str = Field(description="sha256 of the variant's source, first 12 hex digits")
    gpu: str | None = None
    method: str | None = Field(default=None, description="ncu, cupti, cuda_events, perf_counter")
    measured: str | None = Field(default=None, description="When the run was made")
    checks: list[str] = Field(default_factory=list, description="Runs checked against it")


def check_name(name: str) -> str:
    """Refuse names that are not short plain words (they live in one JSON file, and in URIs)."""
    if not _NAME.match(name or ""):
        raise InvalidRequestError(
            f"malformed baseline name {name!r}",
            "Use letters, digits, '.', '_' or '-' (at most 64), starting with a letter or "
            "digit, e.g. main or best-2026-12.",
        )
    return name


def source_hash(*texts: str | None) -> str:
    """The identity of a kernel's code: sha256 over its source texts, first 12 hex digits."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update((text or "").encode())
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def variant_hashes(request: ProfileRequest) -> dict[str, str]:
    """Each measured variant's code identity: its source, the CUDA source and its entry."""
    return {
        v.name: source_hash(v.source or request.source, request.cuda_source, v.entry)
        for v in request.effective_variants()
    }


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """One writer at a time (an advisory lock next to the file; none where fcntl is absent)."""
    with storage_errors(root):
        root.mkdir(parents=True, exist_ok=True)
        with open(root / f"{BASELINES_FILE}.lock", "a") as handle:
            try:
                import fcntl

                fcntl.flock(handle, fcntl.LOCK_EX)
            except ImportError:  # not POSIX: no lock, the write itself is still atomic
                pass
            yield


def read_all(root: Path) -> dict[str, Baseline]:
    """Every baseline of the runs folder by name (none when the file is absent or unreadable)."""
    try:
        data = json.loads((root / BASELINES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    out: dict[str, Baseline] = {}
    for name, entry in (data.get("baselines") or {}).items() if isinstance(data, dict) else ():
        with contextlib.suppress(ValueError, TypeError):
            out[name] = Baseline.model_validate(entry)
    return out


def _write(root: Path, found: dict[str, Baseline]) -> None:
    data = {"baselines": {n: b.model_dump() for n, b in sorted(found.items())}}
    with storage_errors(root):
        write_atomic(root / BASELINES_FILE, json.dumps(data, indent=1))


def get(root: Path, name: str) -> Baseline:
    found = read_all(root)
    if check_name(name) not in found:
        known = ", ".join(sorted(found)) or "none yet"
        raise InvalidRequestError(
            f"No baseline named {name!r} in {root}.",
            f"Baselines: {known}. Name one with `nsight-agent baseline set NAME RUN_ID` "
            "(MCP: get_run with baseline=NAME).",
        )
    return found[name]


def save(root: Path, baseline: Baseline) -> Baseline:
    """Name (or rename onto) a run's variant; a name given again points at the new run."""
    check_name(baseline.name)
    with _locked(root):
        found = read_all(root)
        found[baseline.name] = baseline
        _write(root, found)
    return baseline


def remove(root: Path, name: str) -> Baseline:
    with _locked(root):
        found = read_all(root)
        gone = found.pop(check_name(name), None)
        if gone is None:
            raise InvalidRequestError(f"No baseline named {name!r} in {root}.")
        _write(root, found)
    return gone


def record_check(root: Path, name: str, run_id: str) -> None:
    """Remember that ``run_id`` was checked against baseline ``name`` (for its history)."""
    with _locked(root):
        found = read_all(root)
        if name not in found:
            return
        entry = found[name]
        entry.checks = [*[c for c in entry.checks if c != run_id], run_id][-CHECKS_KEPT:]
        _write(root, found)


def kept_runs(root: Path) -> set[str]:
    """Run ids retention must keep: every run a baseline names."""
    return {b.run_id for b in read_all(root).values()}


def write_environment(run_dir: Path, environment: dict[str, Any]) -> None:
    """``environment.json`` of a run: what the machine was when it was measured."""
    with storage_errors(run_dir):
        write_atomic(run_dir / ENVIRONMENT_FILE, json.dumps(environment, indent=1, default=str))


def read_environment(run_dir: Path) -> dict[str, Any]:
    """A run's recorded environment; empty when none was recorded."""
    try:
        data = json.loads((run_dir / ENVIRONMENT_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def made_by_this_process(run_dir: Path) -> bool:
    """Whether this very process made the run (its status names this pid, start and host):
    then the machine now is the machine it was measured on, and may be recorded as such."""
    status = read_status(run_dir) or {}
    return (
        status.get("pid") == os.getpid()
        and status.get("host") == HOST
        and status.get("pid_started") == children.start_ticks(os.getpid())
    )


def check_fields(
    base: ProfileRequest, variant: str, source: str, entry: str | None
) -> dict[str, Any]:
    """The baseline's request (configs, runs, warmup, clocks, cache, checks) for ``source``:
    one variant, named after its entry (default: the baseline variant's entry); as fields,
    for the validation stage to check and build."""
    old = next(v for v in base.effective_variants() if v.name == variant)
    data = base.model_dump()
    data.update(source=source, variants=[], baseline=None, entry=entry or old.entry)
    return data


def pair_request(base: ProfileRequest, variant: str, new: ProfileRequest) -> ProfileRequest:
    """Both in one run, for runs that cannot be compared: the baseline variant's stored source
    (``baseline``) and the new source (``candidate``), measured interleaved, 10+ runs each."""
    old = next(v for v in base.effective_variants() if v.name == variant)
    data = new.model_dump()
    data["variants"] = [
        {"name": "baseline", "entry": old.entry, "source": old.source or base.source},
        {"name": "candidate", "entry": new.entry, "source": new.source},
    ]
    data.update(baseline="baseline", runs=max(new.runs, 10))
    return ProfileRequest.model_validate(data)


def runs_of(root: Path, wanted: str, also: list[str]) -> list[tuple[str, list[str]]]:
    """Run ids (oldest first) with a variant whose source hash starts with ``wanted``, and
    those variants; runs named in ``also`` are listed too (their variants left empty when
    none matches)."""
    out: list[tuple[str, list[str]]] = []
    names = sorted(d.name for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
    for run_id in names:
        path = root / run_id
        if run_id.startswith(".") or not (path / "request.json").is_file():
            continue
        try:
            hashes = variant_hashes(runs.read_request(path))
        except (OSError, ValueError):
            continue
        hits = [v for v, h in hashes.items() if h.startswith(wanted)]
        if hits or run_id in also:
            out.append((run_id, hits))
    return out
