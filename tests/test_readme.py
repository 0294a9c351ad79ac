"""The README as a reader meets it: every command it gives resolves, and it renders as meant.

Commands: each line of its shell blocks and each inline code span that starts with a command
(pip, uv, make, nsight-agent, ...) is read as the shell would split it and checked offline:
extras exist in pyproject.toml (and no two that uv keeps apart are asked together), pip's
requirement strings parse with ``packaging`` (pip's own parser), an index named on pip's line
is the one uv's configuration names, make targets exist, ``nsight-agent`` command lines parse
with the CLI's own parser, and the repository paths and links it names exist. Where the
network is reachable, pip resolves each ``pip install`` line for real (``--dry-run``), and the
CPU line resolves torch's CPU build with no ``nvidia-*`` wheel.

Rendering: parsed as GitHub-flavoured markdown (CommonMark with tables, ``markdown_it``), no
paragraph lands in a table or a table row in a paragraph, every table ends at a blank line,
and no paragraph starts mid-sentence.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token
from packaging.requirements import InvalidRequirement, Requirement

from nsight_agent.cli.main import build_parser
from tests.project_copy import copy_project

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CLI = "nsight-agent"
COMMANDS = {"pip", "uv", "make", "python3", "claude", ".", "source", CLI}
MAKEFILE = (ROOT / "Makefile").read_text()
MAKE_TARGETS = set(re.findall(r"^([\w-]+):", MAKEFILE, re.M))
VENV = re.findall(r"^VENV := (\S+)", MAKEFILE, re.M)[0]
TOP_LEVEL = {p.name for p in ROOT.iterdir() if not p.name.startswith(".git")} - {VENV}


@functools.cache
def project() -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")
    data: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data


def extras() -> set[str]:
    return set(project()["project"]["optional-dependencies"])


def index_urls() -> set[str]:
    return {index["url"] for index in project()["tool"]["uv"]["index"]}


def conflicts() -> list[set[str]]:
    return [{c["extra"] for c in group} for group in project()["tool"]["uv"]["conflicts"]]


LOCAL_PROJECT = re.compile(r"\.(?:\[([\w,-]+)\])?")


def tokens() -> list[Token]:
    return MarkdownIt("commonmark").enable("table").parse(README.read_text())


def command_lines() -> list[str]:
    """The README's shell command lines: each line of its bash blocks (continuations joined,
    ``&&`` split) and each inline code span whose first word is a command."""
    lines: list[str] = []
    for token in tokens():
        if token.type == "fence" and token.info.strip() == "bash":
            for line in token.content.replace("\\\n", " ").splitlines():
                lines += [part.strip() for part in line.split("&&") if part.strip()]
        for child in token.children or []:
            if child.type == "code_inline" and command_argv(child.content):
                lines.append(child.content)
    return list(dict.fromkeys(lines))


def command_argv(line: str) -> list[str]:
    """``line`` split as the shell would (comments and leading VAR=value dropped), or [] when
    it does not start with a command."""
    try:
        argv = shlex.split(line, comments=True)
    except ValueError:
        return []
    while argv and re.fullmatch(r"[A-Z_]+=\S*", argv[0]):
        argv = argv[1:]
    if argv and (argv[0] in COMMANDS or Path(argv[0]).name in COMMANDS):
        return argv
    return []


def problems_of(argv: list[str]) -> list[str]:
    """What does not resolve in one command line (empty: it resolves)."""
    program = Path(argv[0])
    if program.name == CLI:
        found = [] if CLI in project()["project"]["scripts"] else [f"pyproject has no {CLI}"]
        if program.parent != Path(".") and program.parent.parts[-2:] != (VENV, "bin"):
            found.append(f"{program} is not in make's virtual environment, {VENV}")
        return found + cli_problems(argv[1:])
    if argv[0] in (".", "source"):
        return [] if argv[1:] == [f"{VENV}/bin/activate"] else [f"{argv[1:]}: not {VENV}'s"]
    if argv[:2] == ["pip", "install"]:
        return pip_problems(argv[2:])
    if argv[:2] == ["pip", "wheel"]:
        return [] if (ROOT / argv[-1] / "pyproject.toml").is_file() else [f"no project: {argv}"]
    if argv[:2] == ["uv", "sync"]:
        return extras_problems([v for k, v in itertools.pairwise(argv) if k == "--extra"])
    if argv[:2] == ["uv", "run"]:
        return problems_of(argv[2:])
    if argv[0] == "make":
        return [f"make has no target {t!r}" for t in argv[1:] if t not in MAKE_TARGETS]
    if argv[:3] == ["claude", "mcp", "add"] and "--" in argv:
        return problems_of(argv[argv.index("--") + 1 :])
    if argv[:3] == ["python3", "-m", "venv"]:
        return [] if argv[3:] == [VENV] else [f"{argv[3:]}: not make's {VENV}"]
    return [f"no check for {shlex.join(argv)!r}: teach this test the command"]


def cli_problems(args: list[str]) -> list[str]:
    if not args:
        return []  # the command's name alone, in a sentence
    try:
        build_parser().parse_args(args)
    except SystemExit as end:
        if end.code not in (0, None):
            return [f"nsight-agent {shlex.join(args)}: refused by its parser (exit {end.code})"]
    return []


def pip_problems(args: list[str]) -> list[str]:
    found: list[str] = []
    taking = iter(args)
    for arg in taking:
        if arg in ("--extra-index-url", "--index-url"):
            url = next(taking, "")
            if url not in index_urls():
                found.append(f"pip's {arg} {url} is not the index uv is configured with")
        elif arg.startswith("-"):
            found.append(f"pip option {arg} is not one this test knows")
        elif (local := LOCAL_PROJECT.fullmatch(arg)) is not None:
            found += extras_problems((local.group(1) or "").split(",") if local.group(1) else [])
        else:
            try:
                Requirement(arg)
            except InvalidRequirement as err:
                found.append(f"pip cannot read {arg!r}: {err}")
    return found


def extras_problems(wanted: list[str]) -> list[str]:
    found = [f"pyproject.toml has no extra {e!r}" for e in wanted if e not in extras()]
    apart = [c for c in conflicts() if c <= set(wanted)]
    found += [f"uv resolves {sorted(c)} apart: asked together" for c in apart]
    return found


def test_the_readme_gives_every_install_path() -> None:
    argvs = [command_argv(line) for line in command_lines()]
    for wanted in (
        ["pip", "install", ".[kernels]"],  # a GPU machine
        ["pip", "install", "."],  # reports only
        ["uv", "sync", "--extra", "kernels"],
        ["uv", "sync", "--extra", "cpu"],
        ["uv", "sync"],
        ["make", "demo"],
        ["make", "test"],
    ):
        assert wanted in argvs, wanted
    cpu = [a for a in argvs if a[:3] == ["pip", "install", ".[cpu]"]]
    assert cpu and all(index_urls() & set(a) for a in cpu), cpu  # no GPU: torch's CPU index


@pytest.mark.parametrize("line", command_lines())
def test_each_command_of_the_readme_resolves(line: str) -> None:
    argv = command_argv(line)
    assert argv, line
    assert not problems_of(argv), problems_of(argv)


@pytest.mark.parametrize(
    "line",
    [
        'pip install ".[kernel]"',  # no such extra
        'pip install ".[cpu]" --extra-index-url https://download.pytorch.org/whl/cu128',
        "pip install 'torch=>2.4'",  # pip cannot read it
        "uv sync --extra cpu --extra kernels",  # uv keeps them apart
        "make install",  # no such target
        "nsight-agent profile kernel.py --runz 5",  # the CLI refuses it
        "nsight-agent diagnoze report.ncu-rep",
        "venv/bin/nsight-agent doctor",  # not make's environment
    ],
)
def test_a_command_that_does_not_resolve_is_refused(line: str) -> None:
    assert problems_of(command_argv(line)), line


def repo_paths() -> Iterator[str]:
    """Every relative link target, and every word of a command or code span that names a path
    under one of the repository's top-level folders."""
    for token in tokens():
        words = (
            shlex.split(token.content, comments=True)
            if token.type == "fence" and token.info == "bash"
            else []
        )
        for child in token.children or []:
            if child.type == "link_open":
                href = str(child.attrs.get("href", ""))
                if not re.match(r"[a-z]+:|#", href):
                    yield href
            if child.type == "code_inline":
                words.append(child.content)
        for word in words:
            if "/" in word and word.split("/", 1)[0] in TOP_LEVEL:
                yield word


@pytest.mark.parametrize("path", sorted(set(repo_paths())))
def test_each_path_the_readme_names_exists(path: str) -> None:
    """The file, and for a link into a Markdown section, a heading GitHub gives that anchor."""
    file, _, anchor = path.partition("#")
    assert (ROOT / file).exists(), path
    if anchor:
        headings = re.findall(r"^#+ (.+)$", (ROOT / file).read_text(), re.MULTILINE)
        slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
        assert anchor in slugs, (path, sorted(slugs))


# --- rendering -------------------------------------------------------------------------------


def rows(stream: list[Token]) -> Iterator[tuple[int, list[str]]]:
    """Each table's rows as (columns of its header, cell texts)."""
    columns, cells = 0, []
    for i, token in enumerate(stream):
        if token.type == "thead_open":
            columns = 0
        elif token.type == "th_open":
            columns += 1
        elif token.type == "tr_open":
            cells = []
        elif token.type in ("td_open", "th_open"):
            pass
        elif token.type == "inline" and stream[i - 1].type in ("td_open", "th_open"):
            cells.append(token.content)
        elif token.type == "tr_close":
            yield columns, cells


def test_no_paragraph_lands_in_a_table() -> None:
    for columns, cells in rows(tokens()):
        if columns > 1:
            assert any(c.strip() for c in cells[1:]), f"a paragraph read as a table row: {cells}"


def test_every_table_ends_at_a_blank_line() -> None:
    lines = README.read_text().splitlines()
    for token in tokens():
        if token.type == "table_open" and token.map:
            after = token.map[1]
            assert after >= len(lines) or not lines[after].strip(), (
                f"line {after + 1} follows a table without a blank line: {lines[after]!r}"
            )


def test_no_table_row_lands_in_a_paragraph() -> None:
    stream = tokens()
    for i, token in enumerate(stream):
        if token.type == "paragraph_open":
            for line in stream[i + 1].content.splitlines():
                assert not re.fullmatch(r"\s*\|.*\|\s*", line), f"a table row read as text: {line}"


def test_no_paragraph_starts_mid_sentence() -> None:
    stream = tokens()
    for i, token in enumerate(stream):
        if token.type == "paragraph_open" and token.level == 0:
            text = stream[i + 1].content
            starts_low = text[:1].islower() or re.match(r"(or|and|but)\b", text) is not None
            assert not starts_low, f"a paragraph starts mid-sentence: {text[:80]!r}"


# --- resolution over the network -------------------------------------------------------------

HOSTS = ("pypi.org", "download.pytorch.org")


@pytest.fixture(scope="module")
def online() -> None:
    for host in HOSTS:
        try:
            socket.create_connection((host, 443), timeout=3).close()
        except OSError as err:
            pytest.skip(f"no network: {host}:443 unreachable ({err}); resolved offline only")


def pip_installs() -> list[list[str]]:
    return [a for a in map(command_argv, command_lines()) if a[:2] == ["pip", "install"]]


@pytest.mark.parametrize("argv", pip_installs(), ids=shlex.join)
def test_each_pip_install_resolves(argv: list[str], tmp_path: Path, online: None) -> None:
    report = tmp_path / "report.json"
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q"]
    done = subprocess.run(
        [*pip, "--report", str(report), *argv[2:]],
        cwd=copy_project(tmp_path / "clone"),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    chosen = {
        i["metadata"]["name"].lower(): i["metadata"]["version"]
        for i in json.loads(report.read_text())["install"]
    }
    if ".[cpu]" in argv:
        assert chosen.get("torch", "").endswith("+cpu"), chosen.get("torch")
        # CUDA's wheels (nvidia-cublas-*, nvidia-cudnn-*, ...); nvidia-ml-py, the NVML
        # bindings, is one of the project's own small dependencies.
        own = {Requirement(r).name.lower() for r in project()["project"]["dependencies"]}
        cuda = [n for n in chosen if n.startswith("nvidia-") and n not in own]
        assert not cuda, cuda
