"""Metric names: the catalog and validation against ncu's list or the bundled one; section
names. Searching the catalog by words is ``catalog/search.py``.

The catalog is the list of *base* metric names with type, unit and description. Its source:

* ``ncu --query-metrics --csv`` when ncu is installed and sees a GPU (the names that GPU
  supports; read once per process), or
* the bundled list for gh100 (H100/H200, ncu 2025.3.1) in ``nsight_agent/data/``, which
  ``scripts/build-metric-list`` regenerates. Used offline, in CI, or when ncu fails.

A name given to ncu is a base name plus a suffix that depends on the metric's type (ncu's
"Metrics Structure"; the grammar below was checked against ``ncu --query-metrics-mode all
--chip gh100``, which lists every valid full name):

* counters: a rollup ``.sum`` ``.avg`` ``.min`` ``.max``, optionally followed by a
  submetric: ``.per_second``, ``.per_cycle_active``, ``.per_cycle_elapsed``,
  ``.peak_sustained[_active|_elapsed][.per_second]`` or ``.pct_of_peak_sustained_active|elapsed``;
* throughputs: a rollup followed by ``.pct_of_peak_sustained_active|elapsed``;
* ratios: ``.ratio``, ``.pct`` or ``.max_rate``.

``breakdown:`` may prefix a throughput metric (ncu then reports the sub-metrics it is made of).
Validation matters because ncu 2025.3.1 does not reject a misspelt name or a wrong suffix: it
profiles anyway and reports "n/a" for it (checked on the H200); a bare counter or ratio name is
expanded to all its rollups, and only a bare throughput name fails.
Launch-configuration and device-attribute metrics (``launch__*``, ``device__attribute_*`` and a
few occupancy limits) are not in ncu's list but are accepted by ``--metrics``: they come from a
second bundled list of names seen in ncu reports and accepted by ncu on the H200.
"""

from __future__ import annotations

import csv
import difflib
import functools
import gzip
import re
from importlib import resources
from typing import Literal

from pydantic import BaseModel, Field

from nsight_agent.engine import process
from nsight_agent.engine.collection.ncu import find_ncu
from nsight_agent.errors import (
    InvalidRequestError,
    NcuNotFoundError,
    UnknownMetricError,
)

MetricType = Literal["Counter", "Ratio", "Throughput", "Launch"]

BUNDLED_CHIP = "gh100"
BUNDLED_NCU_VERSION = "2025.3.1"
_BUNDLED_METRICS = "metrics-gh100.tsv.gz"
_BUNDLED_LAUNCH_METRICS = "launch-metrics-gh100.txt"
_BUNDLED_SECTIONS = "sections-ncu-2025.3.1.txt"
QUERY_TIMEOUT_S = 60.0

ROLLUPS = ("sum", "avg", "min", "max")
_PCT_OF_PEAK = (".pct_of_peak_sustained_active", ".pct_of_peak_sustained_elapsed")
_COUNTER_SUBMETRICS = (
    "",
    ".per_second",
    ".per_cycle_active",
    ".per_cycle_elapsed",
    ".peak_sustained",
    ".peak_sustained_active",
    ".peak_sustained_active.per_second",
    ".peak_sustained_elapsed",
    ".peak_sustained_elapsed.per_second",
    *_PCT_OF_PEAK,
)
SUFFIXES: dict[str, tuple[str, ...]] = {
    "Counter": tuple(f".{r}{s}" for r in ROLLUPS for s in _COUNTER_SUBMETRICS),
    "Throughput": tuple(f".{r}{s}" for r in ROLLUPS for s in _PCT_OF_PEAK),
    "Ratio": (".ratio", ".pct", ".max_rate"),
    "Launch": ("",),
}
# The full name most people want for each type: shown in search results and suggestions.
_DEFAULT_SUFFIX = {
    "Counter": ".sum",
    "Throughput": ".avg.pct_of_peak_sustained_elapsed",
    "Ratio": ".ratio",
    "Launch": "",
}
BREAKDOWN_PREFIX = "breakdown:"
# ncu expands these itself; their meaning depends on the GPU, so they are passed through.
_PASS_THROUGH_PREFIXES = ("regex:", "group:")


class MetricInfo(BaseModel):
    """One base metric of the catalog."""

    name: str = Field(description="Base metric name (add a suffix to collect it)")
    type: MetricType = Field(description="Counter, Ratio, Throughput, or Launch (no suffix)")
    unit: str = Field(
        description="Unit of the base value, e.g. byte, cycle, inst, % (may be empty)"
    )
    description: str = Field(description="What the metric counts, as ncu describes it")
    example: str = Field(description="A full name ready for --metrics, e.g. dram__bytes.sum")
    source: str = Field(
        description="Where this entry came from: ncu and its GPU, or the bundled list"
    )


class CatalogSource(BaseModel):
    """Which metric list answered: the live ncu query, or the bundled file."""

    kind: Literal["ncu", "bundled"]
    label: str = Field(description="Short form, e.g. 'ncu 2025.3.1.0 on NVIDIA H200'")
    ncu_version: str | None = None
    devices: list[str] = Field(default_factory=list, description="GPU or chip columns of the query")
    path: str | None = Field(default=None, description="The bundled file, when it was used")
    note: str = Field(default="", description="Why the bundled list was used, if it was")


class MetricCatalog(BaseModel):
    """Base metric names by name, with the source they were read from."""

    source: CatalogSource
    metrics: dict[str, MetricInfo]

    def resolve(self, name: str) -> tuple[MetricInfo, str] | None:
        """Split a full name into (base metric, suffix) by the longest known base prefix."""
        if name in self.metrics:
            return self.metrics[name], ""
        parts = name.split(".")
        for end in range(len(parts) - 1, 0, -1):
            base = ".".join(parts[:end])
            info = self.metrics.get(base)
            if info is not None:
                return info, name[len(base) :]
        return None


# ---------------------------------------------------------------------------------------------
# Loading


def _data_bytes(name: str) -> bytes:
    return resources.files("nsight_agent").joinpath("data", name).read_bytes()


def _data_path(name: str) -> str:
    return str(resources.files("nsight_agent").joinpath("data", name))


def _example(name: str, kind: MetricType, unit: str, description: str) -> str:
    # Hit rates and proportions read best as a percentage; other ratios as they are.
    if kind == "Ratio" and (
        unit == "%" or name.endswith("_rate") or description.startswith("proportion")
    ):
        return name + ".pct"
    return name + _DEFAULT_SUFFIX[kind]


def _info(name: str, kind: MetricType, unit: str, description: str, source: str) -> MetricInfo:
    return MetricInfo(
        name=name,
        type=kind,
        unit=unit,
        description=description,
        example=_example(name, kind, unit, description),
        source=source,
    )


_TYPES_BY_TEXT: dict[str, MetricType] = {
    "counter": "Counter",
    "ratio": "Ratio",
    "throughput": "Throughput",
}


def _as_type(text: str) -> MetricType | None:
    return _TYPES_BY_TEXT.get(text.strip().lower())


def _launch_metrics(label: str) -> dict[str, MetricInfo]:
    """Names ncu accepts in --metrics that --query-metrics does not list (launch__*, ...)."""
    out: dict[str, MetricInfo] = {}
    for line in _data_bytes(_BUNDLED_LAUNCH_METRICS).decode("utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, description = line.partition("\t")
        out[name] = _info(name, "Launch", "", description.strip(), label)
    return out


def bundled_catalog(note: str = "") -> MetricCatalog:
    """The gh100 catalog shipped with the package (ncu 2025.3.1's list for H100/H200)."""
    source = CatalogSource(
        kind="bundled",
        label=f"bundled {BUNDLED_CHIP} list (ncu {BUNDLED_NCU_VERSION})",
        ncu_version=BUNDLED_NCU_VERSION,
        devices=[BUNDLED_CHIP],
        path=_data_path(_BUNDLED_METRICS),
        note=note,
    )
    metrics: dict[str, MetricInfo] = {}
    text = gzip.decompress(_data_bytes(_BUNDLED_METRICS)).decode("utf-8")
    for line in text.splitlines():
        name, kind_text, unit, description = line.split("\t")
        kind = _as_type(kind_text)
        if kind is not None:
            metrics[name] = _info(name, kind, unit, description, source.label)
    metrics.update(_launch_metrics(source.label))
    return MetricCatalog(source=source, metrics=metrics)


def parse_query_csv(text: str) -> tuple[list[str], list[tuple[str, MetricType, str, str]]]:
    """(device columns, rows) from ``ncu --query-metrics --csv`` output.

    The columns are "Metric name", "Metric type", "Metric unit", "Metric description", then
    one per GPU (or chip) with "1" where that GPU has the metric. Lines that are not part of
    the CSV table (ncu's ==PROF==/==WARNING== notes) are skipped.
    """
    lines = [line for line in text.splitlines() if line.startswith('"')]
    reader = csv.reader(lines)
    header = next(reader, None)
    if header is None or [h.strip().lower() for h in header[:2]] != ["metric name", "metric type"]:
        return [], []
    devices = [h for h in header[4:] if h]
    rows: list[tuple[str, MetricType, str, str]] = []
    for row in reader:
        if len(row) < 4:
            continue
        kind = _as_type(row[1])
        flags = [cell.strip() for cell in row[4:]]
        if kind is None or (flags and not any(f not in ("", "0") for f in flags)):
            continue
        rows.append((row[0].strip(), kind, row[2].strip(), " ".join(row[3].split())))
    return devices, rows


def _run(argv: list[str], timeout: float) -> str:
    """stdout of ``argv``; raises RuntimeError on a non-zero exit, RunTimeout past ``timeout``."""
    done = process.run_capture(argv, timeout=timeout)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"exit code {done.returncode}: {' '.join(tail)}")
    return done.stdout


def query_ncu_catalog(ncu: str, timeout: float = QUERY_TIMEOUT_S) -> MetricCatalog:
    """Ask ncu for the attached GPU's metrics. Raises RuntimeError or OSError on failure."""
    version_text = _run([ncu, "--version"], timeout)
    version_lines = [line.strip() for line in version_text.splitlines() if line.strip()]
    match = re.search(r"Version\s+(\S+)", version_text)
    version = match.group(1) if match else (version_lines[-1] if version_lines else "unknown")
    devices, rows = parse_query_csv(_run([ncu, "--query-metrics", "--csv"], timeout))
    if not rows:
        raise RuntimeError("ncu --query-metrics --csv listed no metrics (no supported GPU?)")
    label = f"ncu {version} on {', '.join(devices) or 'this GPU'}"
    source = CatalogSource(kind="ncu", label=label, ncu_version=version, devices=devices)
    metrics = {name: _info(name, kind, unit, desc, label) for name, kind, unit, desc in rows}
    for name, info in _launch_metrics(label).items():
        metrics.setdefault(name, info)
    return MetricCatalog(source=source, metrics=metrics)


@functools.lru_cache(maxsize=4)
def load_catalog(ncu: str | None = None, use_ncu: bool = True) -> MetricCatalog:
    """The metric catalog, read once per process (per argument set).

    With ``use_ncu`` (the default) ncu is asked first (``ncu`` or $NCU / PATH); if it is
    missing, sees no GPU, fails or times out, the bundled gh100 list answers and
    ``source.note`` says why.
    """
    if not use_ncu:
        return bundled_catalog()
    try:
        path = ncu or find_ncu()
    except NcuNotFoundError:
        return bundled_catalog("ncu was not found")
    try:
        return query_ncu_catalog(path, QUERY_TIMEOUT_S)
    except process.RunTimeout:
        return bundled_catalog(f"ncu --query-metrics took longer than {QUERY_TIMEOUT_S:.0f} s")
    except (OSError, RuntimeError) as err:
        return bundled_catalog(f"ncu --query-metrics failed ({err})")


def catalog_source() -> CatalogSource:
    """Which list ``search_metrics`` and ``validate_metrics`` use in this process."""
    return load_catalog().source


# ---------------------------------------------------------------------------------------------
# Validation


def _valid_suffix(info: MetricInfo, suffix: str) -> bool:
    return suffix in SUFFIXES[info.type]


def _close_suffixes(info: MetricInfo, suffix: str) -> list[str]:
    allowed = [s for s in SUFFIXES[info.type] if s]
    close = difflib.get_close_matches(suffix, allowed, n=3, cutoff=0.6) if suffix else []
    return [info.name + s for s in close] or [info.example]


def _split_guess(name: str) -> tuple[str, str]:
    """Guess (base, suffix) of an unknown name: the suffix starts at the first known rollup."""
    match = re.search(r"\.(sum|avg|min|max|ratio|pct|max_rate)(\.|$)", name)
    if match:
        return name[: match.start()], name[match.start() :]
    return name, ""


def suggest(name: str, catalog: MetricCatalog | None = None, limit: int = 5) -> list[str]:
    """Close matches for a metric name that is not valid as written."""
    cat = catalog or load_catalog()
    body = name.removeprefix(BREAKDOWN_PREFIX)
    resolved = cat.resolve(body)
    if resolved is not None:
        return _close_suffixes(resolved[0], resolved[1])[:limit]
    base_guess, suffix = _split_guess(body)
    bases = difflib.get_close_matches(base_guess, list(cat.metrics), n=limit, cutoff=0.6)
    out: list[str] = []
    for base in bases:
        info = cat.metrics[base]
        out.append(base + suffix if _valid_suffix(info, suffix) else info.example)
    return out[:limit]


def _problem(name: str, cat: MetricCatalog) -> str | None:
    """Why ``name`` is not a valid ncu metric name for this catalog, or None if it is."""
    body = name
    breakdown = name.startswith(BREAKDOWN_PREFIX)
    if breakdown:
        body = name[len(BREAKDOWN_PREFIX) :]
    resolved = cat.resolve(body)
    if resolved is None:
        return f"Unknown metric {name!r} for {cat.source.label}."
    info, suffix = resolved
    if breakdown and info.type != "Throughput":
        return (
            f"{name!r}: breakdown: applies only to throughput metrics, and {info.name} is a "
            f"{info.type.lower()}; drop the prefix."
        )
    if not _valid_suffix(info, suffix):
        if not suffix:
            if info.type == "Throughput":
                return f"{name!r} is a base name: a throughput needs a rollup and a % of peak."
            return (
                f"{name!r} is a base name: ncu would collect every rollup of it under other "
                "names; ask for the one you want."
            )
        return (
            f"{name!r}: {suffix!r} is not a valid suffix for the {info.type.lower()} {info.name}."
        )
    return None


def validate_metrics(names: list[str], catalog: MetricCatalog | None = None) -> None:
    """Raise ``UnknownMetricError`` for the first name that is not a valid metric, with close
    matches (ncu itself would only print "n/a" for it and carry on).

    Accepts a base name with a suffix valid for its type, ``breakdown:`` before a throughput
    metric, and launch metrics (``launch__*``). ``regex:`` and ``group:`` selections are left
    for ncu to expand.
    """
    cat = catalog or load_catalog()
    for raw in names:
        name = raw.strip() if isinstance(raw, str) else ""
        if name.startswith(_PASS_THROUGH_PREFIXES):
            continue
        problem = _problem(name, cat) if name else "An empty metric name."
        if problem is not None:
            raise UnknownMetricError(raw, suggest(name, cat) if name else [], problem)


def suggestions(metric: str) -> list[str]:
    """Close matches for a metric name, [] when it is valid or no catalog can be read."""
    try:
        validate_metrics([metric])
    except UnknownMetricError as err:
        return err.suggestions
    except Exception:  # no catalog available: the error still names the metric
        return []
    return []


def is_valid_metric(name: str, catalog: MetricCatalog | None = None) -> bool:
    """True if ``validate_metrics([name])`` would pass."""
    try:
        validate_metrics([name], catalog)
    except UnknownMetricError:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Sections


@functools.lru_cache(maxsize=1)
def known_sections() -> tuple[str, ...]:
    """Section identifiers of ncu 2025.3.1 (``ncu --list-sections``), bundled."""
    text = _data_bytes(_BUNDLED_SECTIONS).decode("utf-8")
    return tuple(
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    )


def validate_sections(names: list[str]) -> None:
    """Raise ``InvalidRequestError`` for a section identifier ncu 2025.3.1 does not have."""
    known = known_sections()
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
            hint = f"Close matches: {', '.join(close)}. " if close else ""
            raise InvalidRequestError(
                f"Unknown section {name!r}.",
                f"{hint}List them with `ncu --list-sections` (identifiers, not display names).",
            )
