"""A figure measured on a GPU, in the reference docs and the README, points to the results file
it came from (bench/results/<suite>/...json, or the BENCHMARKS.md section built from one), and
every results file or section a doc points to exists. docs/BENCHMARKS.md is held to its
results by tests/test_benchmarks_doc.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "BENCHMARKS.md"]
DOCS.append(ROOT / "README.md")
GPU_MODEL = re.compile(r"\b(?:H100|H200|A100|B200|L40S?)\b")
MEASURED = re.compile(r"\d+(?:\.\d+)?\s?(?:us|µs|ms|s|%|x|GiB|GB|MiB|KB|ns)\b")
RESULTS_FILE = re.compile(r"bench/results/[\w.-]+/[\w.-]+\.json")
BENCH_SECTION = re.compile(r"BENCHMARKS\.md#([\w-]+)")


def blocks(text: str) -> list[tuple[int, str]]:
    """(first line, text) of each paragraph, list item, table row and heading."""
    out: list[tuple[int, str]] = []
    lines: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        opens = not line or line.startswith(("|", "- ", "* ", "#")) or re.match(r"\d+\. ", line)
        if opens and lines:
            out.append((start, " ".join(lines)))
            lines = []
        if line:
            start = start if lines else number
            lines.append(line)
            if line.startswith(("|", "#")):
                out.append((start, " ".join(lines)))
                lines = []
    if lines:
        out.append((start, " ".join(lines)))
    return out


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown``."""
    found = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def unsourced(text: str) -> list[int]:
    """First lines of the blocks that name a GPU model beside a measured figure and cite no
    results file or BENCHMARKS.md section."""
    return [
        line
        for line, block in blocks(text)
        if GPU_MODEL.search(block)
        and MEASURED.search(block)
        and not (RESULTS_FILE.search(block) or BENCH_SECTION.search(block))
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_a_figure_measured_on_a_gpu_cites_its_results(doc: Path) -> None:
    assert unsourced(doc.read_text()) == [], (
        f"{doc.name}: these blocks give a figure measured on a GPU without its results file "
        "(bench/results/<suite>/<file>.json or BENCHMARKS.md#<suite>)"
    )


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_results_file_and_section_cited_exists(doc: Path) -> None:
    text = doc.read_text()
    missing = [p for p in RESULTS_FILE.findall(text) if not (ROOT / p).is_file()]
    sections = anchors((ROOT / "docs" / "BENCHMARKS.md").read_text())
    missing += [f"BENCHMARKS.md#{a}" for a in BENCH_SECTION.findall(text) if a not in sections]
    assert missing == []


def test_the_check_finds_an_unsourced_figure_and_accepts_a_cited_one() -> None:
    text = (
        "Intro line.\n\nOn an H100 a call took 3.1 s, against\n4.9 s cold.\n\n"
        "- On an H100 the same took 3.1 s ([file](../bench/results/perf/x.json)).\n"
        "- On an H200 drift was 0.1 % (BENCHMARKS.md#baseline-drift).\n"
        "| an H200 | a limit of 20 s |\n\n"
        "TORCH_CUDA_ARCH_LIST is 9.0 on an H200.\n"
    )
    assert unsourced(text) == [3, 8]
    assert "baseline-drift" in anchors("## baseline-drift\n")
