"""The project's files describe what is and why, never the history of the work on them.

History belongs in git log. This test reads the tracked text files of the project and fails,
naming file:line, on four markers of a lab notebook: an ordinal-numbered period of work ("the
twenty-sixth session", "fourteenth to eighteenth visits"), a GPU "visit" ("gpu-visit 34", "each
visit"), the lending or borrowing of machines, and "issue <number>" as a history marker. The
patterns look for those forms, not for the bare words: "the first kernel", an MCP session,
"every fourth element" and a chain that visits its elements all pass.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What is searched: the project's prose, code, tests and scripts.
SEARCHED = (
    "docs",
    "nsight_agent",
    "tests",
    "bench",
    "scripts",
    "skills",
    "examples",
    "README.md",
    "CHANGELOG.md",
    "CONTRIBUTING.md",
)
# Recorded data, not prose: a results file holds a run's output verbatim.
NOT_SEARCHED = ("bench/results/",)

_ORDINAL = (
    r"(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"
    r"|thirteenth|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth"
    r"|(?:twenty|thirty|forty)[- ](?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth)"
    r"|thirtieth|fortieth|\d+(?:st|nd|rd|th))"
)
# A period of work, named by its place in a sequence.
_PERIOD_NOUN = r"(?:sessions?|visits?|periods?|sittings?)"

PATTERNS: dict[str, re.Pattern[str]] = {
    "numbered period of work": re.compile(
        # "a second session" is one more of something (an MCP session), not a numbered one
        rf"(?<!\ba )\b{_ORDINAL}(?:\s*(?:,|-|–|to|and|or|through)\s*{_ORDINAL})*\s+{_PERIOD_NOUN}\b"
        rf"|\b{_PERIOD_NOUN}\s+\d+\b",
        re.IGNORECASE,
    ),
    # "visit" as a noun for a stay on a GPU machine; the verb ("a chain visits each
    # element", pydantic's "visit https://...") and ast's visit_* methods pass.
    "GPU visit": re.compile(
        r"\bgpu[- _]visits?\b"
        r"|\b(?:a|the|this|that|each|every|one|per|next|last|previous|later|earlier)\s+visits?\b",
        re.IGNORECASE,
    ),
    "lending of machines": re.compile(
        r"\b(?:lent|lend|lends|lending|borrow|borrows|borrowed|borrowing)\b", re.IGNORECASE
    ),
    "issue number as history": re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE),
}

# This file states the patterns and plants examples of what they catch.
ALLOWED_FILES = ("tests/test_no_narration.py",)


def narration(line: str) -> list[str]:
    """The kinds of narration on one line (empty when the line describes what is)."""
    return [kind for kind, pattern in PATTERNS.items() if pattern.search(line)]


def searched_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *SEARCHED],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted(
        path
        for path in listed.split("\0")
        if path
        and not path.startswith(NOT_SEARCHED)
        and path not in ALLOWED_FILES
        and (ROOT / path).is_file()
    )


def hits_in(path: str) -> list[str]:
    data = (ROOT / path).read_bytes()
    if b"\0" in data:  # a binary file (a report, a compressed table)
        return []
    found = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        for kind in narration(line):
            found.append(f"{path}:{number}: {kind}: {line.strip()[:120]}")
    return found


@pytest.mark.parametrize(
    "line",
    [
        "all five cases passed on the H200 (eighteenth session, docs/GPU_RUNS.md).",
        "organised by the fourteenth to eighteenth sessions",
        "Twenty-sixth session: four H100 calls",
        "the user's calls profiled nothing (twenty-sixth session);",
        "measured in the 26th visit",
        "### Third session (issue 37)",
        "in session 4 the gate held",
        "two planted matmuls lost their first cause on the H200 (gpu-visit 34).",
        "run scripts/gpu-visit 1 on the machine",
        "one batched command per visit",
        "the pinned checkout the visits read",
        "GPU work runs on a lent H200",
        "a device was borrowed for thirty minutes",
        "(issue 35 moved child_env here from ncu)",
        '"""A step that is never silent (Issue 38, part 4)."""',
        "issues 36 and 37 asked for it",
    ],
)
def test_the_matcher_catches_narration(line: str) -> None:
    assert narration(line), line


@pytest.mark.parametrize(
    "line",
    [
        "The first kernel of the step is timed first, the second one after it.",
        "The MCP session stays open; a second session on the same server sees the baseline.",
        "only every fourth element is written, so the check must read them all",
        "the sixth tool lists the runs",
        "next[i] = (i + stride) mod n: thread t's chain visits t, t+T, t+2T, ...",
        "Extra inputs are not permitted ... visit https://errors.pydantic.dev",
        "class Walker(ast.NodeVisitor): def visit_Call(self, node): self.generic_visit(node)",
        "def visit(node: str) -> bool:",
        "a first pass with cheap counters, then a second pass with sections",
        "equivalent, lentil, blender: words that contain the letters",
        "ncu reports an issue with the kernel's occupancy",
        "the 2nd call (after the check call); on the timing path its 4th",
    ],
)
def test_the_matcher_passes_what_is(line: str) -> None:
    assert narration(line) == [], line


def test_no_file_narrates_the_history_of_the_work() -> None:
    files = searched_files()
    assert len(files) > 100, "the search found too few files to mean anything"
    hits = [hit for path in files for hit in hits_in(path)]
    assert hits == [], "narration (history belongs in git log):\n" + "\n".join(hits)
