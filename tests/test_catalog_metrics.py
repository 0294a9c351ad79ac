"""Metric catalog: the bundled gh100 list, the ncu query path, validation and search."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nsight_agent.catalog import metrics as mc
from nsight_agent.catalog.search import search_metrics
from nsight_agent.errors import InvalidRequestError, NcuNotFoundError, UnknownMetricError

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference"
BUILD_SCRIPT = ROOT / "scripts" / "build-metric-list"


@pytest.fixture()
def bundled(monkeypatch: pytest.MonkeyPatch) -> mc.MetricCatalog:
    """Make every lookup use the bundled gh100 list, whether or not ncu is installed."""
    catalog = mc.bundled_catalog()
    monkeypatch.setattr(mc, "load_catalog", lambda *args, **kwargs: catalog)
    return catalog


@pytest.fixture()
def fresh_cache() -> Iterator[None]:
    mc.load_catalog.cache_clear()
    yield
    mc.load_catalog.cache_clear()


# --- the bundled list ------------------------------------------------------------------------


def test_bundled_catalog_holds_gh100_metrics_with_types_and_units() -> None:
    cat = mc.bundled_catalog()
    assert cat.source.kind == "bundled"
    assert cat.source.devices == ["gh100"]
    assert cat.source.path is not None and cat.source.path.endswith("metrics-gh100.tsv.gz")
    counted = [m for m in cat.metrics.values() if m.type != "Launch"]
    # `ncu --query-metrics --chip gh100` (ncu 2025.3.1) lists 3650 base metrics.
    assert len(counted) == 3650
    assert (cat.metrics["dram__bytes"].type, cat.metrics["dram__bytes"].unit) == ("Counter", "byte")
    assert cat.metrics["sm__throughput"].type == "Throughput"
    assert cat.metrics["lts__t_sector_hit_rate"].type == "Ratio"
    assert cat.metrics["dram__bytes"].example == "dram__bytes.sum"
    assert cat.metrics["l1tex__t_sector_hit_rate"].example == "l1tex__t_sector_hit_rate.pct"
    assert cat.metrics["FE_A.TriageCompute.gr__dispatch_count"].unit == ""


def test_wrapped_descriptions_are_joined() -> None:
    # In ncu's table this description continues on an indented second line.
    info = mc.bundled_catalog().metrics[
        "FBSP.TriageCompute.dramc__write_throughput_internal_activity"
    ]
    assert (
        info.description
        == "DRAMC Write Throughput (TriageCompute Configuration), internal activity"
    )


def test_launch_metrics_are_known_without_suffix() -> None:
    cat = mc.bundled_catalog()
    assert cat.metrics["launch__grid_size"].type == "Launch"
    assert cat.metrics["sm__maximum_warps_per_active_cycle_pct"].example == (
        "sm__maximum_warps_per_active_cycle_pct"
    )
    assert "device__attribute_multiprocessor_count" in cat.metrics


SAMPLE_TABLE = """\
Chip gh100
---------------------------------- --------------- --------------- ------------------------
Metric Name                        Metric Type     Metric Unit     Metric Description
---------------------------------- --------------- --------------- ------------------------
zz__wide_name_column_metric                        Counter         byte            # of bytes, with a description that
                                                                                   wraps onto a second line
aa__short                          Ratio                           proportion of things
mm__speed                          Throughput      %               Some throughput
==PROF== Note that these metrics must be appended with a valid suffix before profiling them.
"""


def test_build_script_parses_ncu_table_with_shifting_columns(tmp_path: Path) -> None:
    src = tmp_path / "table.txt"
    src.write_text(SAMPLE_TABLE)
    out = tmp_path / "out.tsv.gz"
    done = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), str(src), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in gzip.decompress(out.read_bytes()).decode().splitlines()]
    assert rows == [
        ["aa__short", "Ratio", "", "proportion of things"],
        ["mm__speed", "Throughput", "%", "Some throughput"],
        [
            "zz__wide_name_column_metric",
            "Counter",
            "byte",
            "# of bytes, with a description that wraps onto a second line",
        ],
    ]


def test_build_script_fails_on_a_file_without_metrics(tmp_path: Path) -> None:
    src = tmp_path / "empty.txt"
    src.write_text("nothing here\n")
    done = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), str(src), "-o", str(tmp_path / "x.gz")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "no metric rows" in done.stderr


@pytest.mark.skipif(
    not (REFERENCE / "ncu-2025.3.1-query-metrics-gh100.txt").is_file(),
    reason="the shared reference folder is not beside this checkout",
)
def test_bundled_file_is_what_the_build_script_makes_from_the_reference(tmp_path: Path) -> None:
    out = tmp_path / "rebuilt.tsv.gz"
    subprocess.run(
        [
            sys.executable,
            str(BUILD_SCRIPT),
            str(REFERENCE / "ncu-2025.3.1-query-metrics-gh100.txt"),
            "-o",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    committed = ROOT / "nsight_agent" / "data" / "metrics-gh100.tsv.gz"
    assert out.read_bytes() == committed.read_bytes()


# --- validation ------------------------------------------------------------------------------

VALID = [
    "dram__bytes.sum",
    "dram__bytes.avg.per_second",
    "dram__bytes.sum.peak_sustained",
    "dram__bytes.max.pct_of_peak_sustained_elapsed",
    "dram__bytes.avg.peak_sustained_active.per_second",
    "sm__cycles_elapsed.avg.per_cycle_active",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.min.pct_of_peak_sustained_active",
    "breakdown:sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "lts__t_sector_hit_rate.pct",
    "lts__t_sector_hit_rate.ratio",
    "lts__t_sector_hit_rate.max_rate",
    "launch__grid_size",
    "sm__maximum_warps_per_active_cycle_pct",
    "FBSP.TriageCompute.dramc__throughput.avg.pct_of_peak_sustained_elapsed",
    "CTC.TriageCompute.ctc__rx_bytes.avg.pct_of_peak_sustained_active",
    "regex:^dram__.*",
    "  gpu__time_duration.sum  ",
]


def test_valid_names_pass(bundled: mc.MetricCatalog) -> None:
    mc.validate_metrics(VALID)
    assert all(mc.is_valid_metric(n) for n in VALID)


def test_every_counter_suffix_is_accepted_and_counted_as_ncu_lists_them() -> None:
    # `ncu --query-metrics-mode all --chip gh100` lists 44 full names per counter, 8 per
    # throughput and 3 per ratio; these are the same suffixes.
    assert len(mc.SUFFIXES["Counter"]) == 44
    assert len(mc.SUFFIXES["Throughput"]) == 8
    assert set(mc.SUFFIXES["Ratio"]) == {".ratio", ".pct", ".max_rate"}
    cat = mc.bundled_catalog()
    mc.validate_metrics(["dram__bytes" + s for s in mc.SUFFIXES["Counter"]], cat)


@pytest.mark.parametrize(
    ("name", "expected_suggestion", "reason"),
    [
        ("dram__bytez.sum", "dram__bytes.sum", "Unknown metric"),
        (
            "sm__throughput.avg.per_second",
            "sm__throughput.avg.pct_of_peak_sustained_elapsed",
            "not a valid suffix",
        ),
        ("lts__t_sector_hit_rate.sum", "lts__t_sector_hit_rate.pct", "not a valid suffix"),
        ("dram__bytes", "dram__bytes.sum", "base name"),
        ("sm__throughput", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "base name"),
        ("breakdown:dram__bytes.sum", "dram__bytes.sum", "only to throughput"),
        (
            "dram__bytes.sum.pct_of_peak_sustaned_elapsed",
            "dram__bytes.sum.pct_of_peak_sustained_elapsed",
            "not a valid suffix",
        ),
        ("dram__bytes.avg.per_second.pct", None, "not a valid suffix"),
        ("launch__grid_size.sum", None, "not a valid suffix"),
    ],
)
def test_invalid_names_raise_with_close_matches(
    bundled: mc.MetricCatalog, name: str, expected_suggestion: str | None, reason: str
) -> None:
    with pytest.raises(UnknownMetricError) as info:
        mc.validate_metrics(["gpu__time_duration.sum", name])
    err = info.value
    assert err.metric == name
    assert reason in err.message
    if expected_suggestion is not None:
        assert expected_suggestion in err.suggestions
    assert all(mc.is_valid_metric(s) for s in err.suggestions)
    assert not mc.is_valid_metric(name)


def test_empty_name_is_rejected(bundled: mc.MetricCatalog) -> None:
    with pytest.raises(UnknownMetricError):
        mc.validate_metrics([" "])


def test_error_says_which_list_was_used(bundled: mc.MetricCatalog) -> None:
    with pytest.raises(UnknownMetricError, match="bundled gh100 list"):
        mc.validate_metrics(["not_a_metric.sum"])


# --- search ----------------------------------------------------------------------------------


def test_search_ranks_names_and_descriptions(bundled: mc.MetricCatalog) -> None:
    hits = search_metrics("dram bytes", limit=5)
    assert hits[0].name == "dram__bytes"
    assert len(hits) == 5
    l2 = [m.name for m in search_metrics("L2 hit rate", limit=3)]
    assert "lts__t_sector_hit_rate" in l2
    assert all(m.source == bundled.source.label for m in hits)


def test_search_with_a_full_name_finds_its_base_first(bundled: mc.MetricCatalog) -> None:
    hits = [m.name for m in search_metrics("dram__bytes.sum.per_second")]
    assert hits[0] == "dram__bytes"
    assert "dram__bytes_read" in hits


def test_search_every_word_must_match(bundled: mc.MetricCatalog) -> None:
    hits = search_metrics("shared bank conflicts", limit=50)
    assert hits
    for m in hits:
        text = f"{m.name} {m.description}".lower()
        assert all(w in text for w in ("shared", "bank", "conflicts"))
    assert search_metrics("") == []
    assert search_metrics("dram", limit=0) == []
    assert search_metrics("zzzz_no_such_thing") == []


# --- the ncu path ----------------------------------------------------------------------------

# The start of `ncu --query-metrics --csv` on an H200 (ncu 2025.3.1), plus a noise line and a
# metric marked 0 (not on this GPU).
NCU_CSV = """\
==PROF== a note ncu might print
"Metric name","Metric type","Metric unit","Metric description","NVIDIA H200"
"FBSP.TriageCompute.dramc__cycles_elapsed","Counter","cycle","","1"
"FBSP.TriageCompute.dramc__read_throughput","Throughput","%","DRAMC Read Throughput (TriageCompute Configuration)","1"
"dram__bytes","Counter","byte","# of bytes accessed in DRAM","1"
"lts__t_sector_hit_rate","Ratio","","proportion of L2 sector lookups that hit","1"
"not__on_this_gpu","Counter","byte","absent","0"
"""


def test_parse_query_csv_reads_devices_and_rows() -> None:
    devices, rows = mc.parse_query_csv(NCU_CSV)
    assert devices == ["NVIDIA H200"]
    assert [r[0] for r in rows] == [
        "FBSP.TriageCompute.dramc__cycles_elapsed",
        "FBSP.TriageCompute.dramc__read_throughput",
        "dram__bytes",
        "lts__t_sector_hit_rate",
    ]
    assert rows[2] == ("dram__bytes", "Counter", "byte", "# of bytes accessed in DRAM")
    assert mc.parse_query_csv("garbage\n") == ([], [])


def _fake_ncu(tmp_path: Path, csv_text: str, rc: int = 0) -> str:
    csv_file = tmp_path / "query.csv"
    csv_file.write_text(csv_text)
    script = tmp_path / "ncu"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then\n'
        "  echo 'NVIDIA (R) Nsight Compute Command Line Profiler'\n"
        "  echo 'Version 2025.3.1.0 (build 36398880) (public-release)'\n"
        "  exit 0\n"
        "fi\n"
        f'[ "$1" = "--query-metrics" ] && [ "$2" = "--csv" ] || exit 7\n'
        f"cat '{csv_file}'\n"
        f"exit {rc}\n"
    )
    script.chmod(0o755)
    return str(script)


@pytest.mark.skipif(os.name != "posix", reason="the stand-in ncu is a shell script")
def test_ncu_query_is_preferred_and_recorded(tmp_path: Path, fresh_cache: None) -> None:
    cat = mc.load_catalog(_fake_ncu(tmp_path, NCU_CSV))
    assert cat.source.kind == "ncu"
    assert cat.source.ncu_version == "2025.3.1.0"
    assert cat.source.devices == ["NVIDIA H200"]
    assert cat.source.label == "ncu 2025.3.1.0 on NVIDIA H200"
    assert cat.metrics["dram__bytes"].source == cat.source.label
    assert "not__on_this_gpu" not in cat.metrics
    assert "launch__grid_size" in cat.metrics  # launch metrics are added to ncu's list
    mc.validate_metrics(["dram__bytes.sum"], cat)
    with pytest.raises(UnknownMetricError, match=r"ncu 2025\.3\.1\.0 on NVIDIA H200"):
        mc.validate_metrics(["sm__throughput.avg.pct_of_peak_sustained_elapsed"], cat)


@pytest.mark.skipif(os.name != "posix", reason="the stand-in ncu is a shell script")
def test_failing_ncu_falls_back_to_the_bundled_list(tmp_path: Path, fresh_cache: None) -> None:
    cat = mc.load_catalog(_fake_ncu(tmp_path, "==ERROR== No supported GPU\n", rc=1))
    assert cat.source.kind == "bundled"
    assert "failed" in cat.source.note
    other = tmp_path / "other"
    other.mkdir()
    empty = mc.load_catalog(_fake_ncu(other, "", rc=0))
    assert empty.source.kind == "bundled"
    assert "listed no metrics" in empty.source.note


@pytest.mark.skipif(os.name != "posix", reason="the stand-in ncu is a shell script")
def test_hanging_ncu_is_killed_and_the_bundled_list_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_cache: None
) -> None:
    script = tmp_path / "ncu"
    script.write_text("#!/bin/sh\nsleep 30\n")
    script.chmod(0o755)
    monkeypatch.setattr(mc, "QUERY_TIMEOUT_S", 0.5)
    cat = mc.load_catalog(str(script))
    assert cat.source.kind == "bundled"
    assert "took longer than" in cat.source.note


def test_missing_ncu_falls_back_to_the_bundled_list(
    monkeypatch: pytest.MonkeyPatch, fresh_cache: None
) -> None:
    def no_ncu() -> str:
        raise NcuNotFoundError("no ncu")

    monkeypatch.setattr(mc, "find_ncu", no_ncu)
    cat = mc.load_catalog()
    assert cat.source.kind == "bundled"
    assert cat.source.note == "ncu was not found"
    assert mc.catalog_source() == cat.source
    assert mc.load_catalog() is cat  # cached per process


# --- sections --------------------------------------------------------------------------------


def test_known_sections_and_validation() -> None:
    known = mc.known_sections()
    assert len(known) == 24
    assert {"SpeedOfLight", "SpeedOfLight_RooflineChart", "LaunchStats", "Occupancy"} <= set(known)
    mc.validate_sections(["SpeedOfLight", "MemoryWorkloadAnalysis_Tables"])
    with pytest.raises(InvalidRequestError, match="SpeedOfLight") as info:
        mc.validate_sections(["SpeedOfLite"])
    assert "Close matches" in info.value.hint


@pytest.mark.skipif(
    not (REFERENCE / "ncu-2025.3.1-sections.txt").is_file(),
    reason="the shared reference folder is not beside this checkout",
)
def test_bundled_sections_match_the_reference_listing() -> None:
    lines = (REFERENCE / "ncu-2025.3.1-sections.txt").read_text().splitlines()
    listed = [line.split()[0] for line in lines[3:] if line.strip()]
    assert list(mc.known_sections()) == listed
