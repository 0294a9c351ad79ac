"""Errors that name the right thing: a wrong argument answered with the one meant, no
validation library's wording without a hint line, a run id where the command takes one, a
timing run asked for counters told how to get them, and hints that name only options the
command has. MCP cases through the SDK's client, command-line cases through ``cli.main``."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent

from nsight_agent import cli
from nsight_agent.cli import parser
from nsight_agent.cli.main import build_parser
from nsight_agent.engine import pipeline
from nsight_agent.engine.store.facts import RunFacts
from nsight_agent.server.app import build_server

# What pydantic says in its own words; none of it may reach a caller.
PYDANTIC_WORDS = (
    "validation error for",
    "Field required",
    "Value error,",
    "Input should be",
    "Extra inputs are not permitted",
    "errors.pydantic.dev",
    "[type=",
)
SOURCE = "import torch\n\ndef setup(n, device):\n    return (torch.ones(n),)\n\ndef run(x):\n    return x + 1\n"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def runs(sweep: Any, tmp_path: Path) -> Path:
    """A runs folder with an ncu run (the recorded H200 sweep) and a timing run of it
    (no report, timed by perf_counter)."""
    root = tmp_path / "runs"
    sweep.run(root, run_id="20261201-000000-ncu")
    timed = sweep.run(root, run_id="20261201-000000-timing")
    (timed.run_dir / "report.ncu-rep").unlink()
    timed.facts = RunFacts(method="perf_counter")
    pipeline.save_result(timed)
    return root


async def _answers(root: Path | None, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
    out = []
    async with Client(build_server(runs_root=root)) as client:
        for tool, args in calls:
            answer = await client.call_tool(tool, args)
            assert answer.is_error, (tool, args)
            out.append("\n".join(c.text for c in answer.content if isinstance(c, TextContent)))
    return out


# --- MCP: the argument meant ------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tool", "args", "said"),
    [
        ("get_skill", {"skill": "memory"}, "unknown argument 'skill'; did you mean 'name'?"),
        ("get_run", {"runid": "x"}, "unknown argument 'runid'; did you mean 'run_id'?"),
        (
            "profile_kernel",
            {"source": SOURCE, "config": [{"n": 4}]},
            "unknown argument 'config'; did you mean 'configs'?",
        ),
        (
            "profile_kernel",
            {"source": SOURCE, "timeout": 30},
            "unknown argument 'timeout'; did you mean 'options.timeout_s'?",
        ),
        (
            "compare_variants",
            {"variant": [{"name": "a"}]},
            "unknown argument 'variant'; did you mean 'variants'?",
        ),
        (
            "diagnose_kernel",
            {"report": "x.ncu-rep"},
            "unknown argument 'report'; did you mean 'report_path'?",
        ),
        (
            "device_info",
            {"probe": True},
            "unknown argument 'probe'; did you mean 'probe_counters'?",
        ),
        ("summarize_report", {"report": "x"}, "unknown argument 'report'; did you mean 'path'?"),
    ],
)
async def test_a_wrong_argument_name_is_answered_with_the_right_one(
    tool: str, args: dict[str, Any], said: str
) -> None:
    (text,) = await _answers(None, [(tool, args)])
    assert said in text, text
    assert f"\nHint: {tool} takes " in text  # and every argument the tool has


@pytest.mark.anyio
async def test_no_pydantic_wording_reaches_an_mcp_client(runs: Path) -> None:
    """Every way a call's arguments can be malformed, on every kind of tool, and a stored run
    whose request no longer validates: our words, then a hint line."""
    bad = runs / "20261201-000000-ncu" / "request.json"
    bad.write_text(bad.read_text().replace('"runs":3', '"runs":"three"'))
    calls: list[tuple[str, dict[str, Any]]] = [
        ("get_skill", {}),
        ("get_skill", {"name": 3}),
        ("query_metrics", {"query": "dram", "limit": 0}),
        ("get_run", {"run_id": "x", "limit": "many"}),
        ("get_run_rows", {"run_id": "x", "table": "cooked"}),
        ("summarize_report", {"path": "x", "offset": -1}),
        ("profile_kernel", {"source": SOURCE, "configs": "n=4"}),
        ("profile_kernel", {"source": SOURCE, "configs": [{"n": 4}], "runs": 0}),
        ("profile_kernel", {"source": SOURCE, "configs": [{"n": 4}], "options": {"timout_s": 1}}),
        ("profile_kernel", {"source": SOURCE, "configs": [{"n": 4}], "metrics": []}),
        ("compare_variants", {"variants": [{"nam": "a"}, {"name": "b"}]}),
        ("compare_variants", {"variants": [{"name": "-a"}, {"name": "b"}], "source": SOURCE}),
        ("roofline_metrics", {"limit": 1000}),
        ("diagnose_kernel", {"limit": 0, "offset": "first"}),
        ("list_skills", {"verbose": True}),
        ("plot_run", {"run_id": 7}),
        ("get_run", {"run_id": "20261201-000000-ncu"}),
    ]
    for (tool, args), text in zip(calls, await _answers(runs, calls), strict=True):
        leaked = [w for w in PYDANTIC_WORDS if w in text]
        assert not leaked, (tool, args, text)
        assert "\nHint: " in text, (tool, args, text)


@pytest.mark.anyio
async def test_a_timing_run_asked_for_counters_says_why_and_the_call_that_gets_them(
    runs: Path,
) -> None:
    timing = "20261201-000000-timing"
    said = await _answers(
        runs,
        [("diagnose_kernel", {"run_id": timing}), ("roofline_metrics", {"run_id": timing})],
    )
    source = runs / timing / "user_source.py"
    for text in said:
        assert "timing path keeps no counters" in text, text
        assert f"diagnose_kernel(source=<text of {source}>, configs=[" in text, text
        assert "\nHint: Profile its source under ncu" in text


# --- the command line -------------------------------------------------------------------------


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_diagnose_takes_a_run_id_as_its_argument(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = ["--runs-root", str(runs)]
    code, by_argument, _ = _run(["diagnose", "20261201-000000-ncu", *root], capsys)
    assert code == 0 and "kernel(s) on NVIDIA H200" in by_argument
    code, by_option, _ = _run(["diagnose", "--run-id", "20261201-000000-ncu", *root], capsys)
    assert code == 0 and by_option == by_argument
    code, _, err = _run(["diagnose", "20261201-no-such-run", *root], capsys)
    assert code == 2 and "No file or run at 20261201-no-such-run" in err
    assert "the id of an earlier run (`nsight-agent runs` lists them" in err


def test_diagnose_of_a_timing_run_gives_the_command_that_collects_counters(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    timing = "20261201-000000-timing"
    for argv in (["diagnose", timing], ["diagnose", "--run-id", timing]):
        code, _, err = _run([*argv, "--runs-root", str(runs)], capsys)
        assert code == 2
        assert "timing path keeps no counters" in err
        source = runs / timing / "user_source.py"
        grid = '\'[{"n": 4096}, {"n": 65536}, {"n": 1048576}]\''
        command = f"`nsight-agent diagnose {source} --grid {grid} --language triton`"
        assert command in err, err
        # the command it gives is one the parser takes
        args = build_parser().parse_args(
            ["diagnose", str(source), "--grid", grid.strip("'"), "--language", "triton"]
        )
        assert args.file == str(source) and args.language == "triton"


def test_a_stored_request_that_no_longer_validates_is_said_in_our_words(
    runs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = runs / "20261201-000000-ncu" / "request.json"
    bad.write_text(bad.read_text().replace('"runs":3', '"runs":"three"'))
    code, _, err = _run(["runs", "show", "20261201-000000-ncu", "--runs-root", str(runs)], capsys)
    assert code == 1
    assert "does not read as a request of this version (runs: must be an integer)" in err
    assert "\nHint: " in err and not [w for w in PYDANTIC_WORDS if w in err]


# --- hints name only options the command has --------------------------------------------------

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z-]*")
OTHER_TOOLS = ("pip ", "ncu ", "uv ")


def flags_of(command: str) -> set[str]:
    found = next(c for c in parser.COMMANDS if c.name == command)
    return {f for flags, _ in found.options for f in flags if f.startswith("--")} | {"--help"}


def foreign_flags(text: str, command: str) -> list[str]:
    """The ``--flags`` a message names that the command it answers does not have: a flag
    inside a quoted `nsight-agent OTHER ...` must be OTHER's; one of pip or ncu is theirs."""
    wrong = []
    spans = [(m.start(), m.end(), m.group(1)) for m in re.finditer(r"`([^`]*)`", text)]
    for m in FLAG.finditer(text):
        span = next((s for s in spans if s[0] < m.start() < s[1]), None)
        if span is not None:
            words = span[2].split()
            if words[:1] != ["nsight-agent"]:
                continue  # another program's command line
            owner = words[1]
        else:
            before = text[max(0, m.start() - 60) : m.start()]
            if any(t in before.split(";")[-1] for t in OTHER_TOOLS):
                continue
            owner = command
        if m.group() not in flags_of(owner):
            wrong.append(f"{owner} {m.group()}")
    return wrong


def test_the_flag_checker_catches_a_flag_the_command_lacks() -> None:
    assert foreign_flags("use --method timing", "diagnose") == ["diagnose --method"]
    assert foreign_flags("run `nsight-agent profile F --method timing`", "diagnose") == []
    assert foreign_flags("see `ncu --query-metrics`; pip install torch --index-url u", "x") == []


def test_every_hint_names_options_its_command_has(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each command's errors that need no GPU, each checked against that command's parser."""
    if shutil.which("ncu"):
        pytest.skip("ncu is installed here: the no-ncu hints are not given")
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", str(runs))
    source = tmp_path / "add.py"
    source.write_text(SOURCE)
    not_python = tmp_path / "notes.txt"
    not_python.write_bytes(b"\xff\xfe not text")
    timing, src, missing = "20261201-000000-timing", str(source), str(tmp_path / "none.py")
    cases: list[list[str]] = [
        ["profile", src, "--language", "torch", "--config", "n=4"],
        ["profile", src, "--config", "n"],
        ["profile", src, "--grid", "{"],
        ["profile", src, "--metrics", "dram__bytes.summ", "--config", "n=4"],
        ["profile", missing],
        ["profile", str(not_python)],
        ["compare", src, "--variant", "a"],
        ["compare", src, "--variant", "a=run", "--variant", "b=run", "--config", "n=4"],
        ["diagnose", src, "--config", "n=4", "--language", "torch"],
        ["diagnose", timing],
        ["diagnose", "--run-id", "20261201-no-such-run"],
        ["diagnose", str(not_python)],
        ["diagnose"],
        ["report", src],
        ["report", missing],
        ["runs", "show", "20261201-no-such-run"],
        ["runs", "show"],
        ["skills", "no-such-skill"],
        ["baseline", "set", "main", "20261201-no-such-run"],
        ["diff", "20261201-no-such-run", "main"],
        ["check", src, "--baseline", "no-such-baseline"],
        ["history", "no-such-baseline"],
    ]
    said = {}
    wrong = []
    for argv in cases:
        code, _, err = _run(argv, capsys)
        assert code != 0 and err, argv
        said[" ".join(argv[:1] + argv[1:2])] = err
        wrong += [f"{' '.join(argv)}: {w}" for w in foreign_flags(err, argv[0])]
    assert not wrong, "\n".join(wrong)
    # what a command says it takes is what it takes: profile reads no report
    assert "profile takes a kernel source file" in said[f"profile {not_python}"]
    assert "`nsight-agent report` reads a .ncu-rep" in said[f"profile {not_python}"]


def test_an_option_the_command_lacks_is_named_with_the_command_that_has_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hint written for any ncu run (a timeout's: "or method='timing'") reaching a command
    without --method names `nsight-agent profile FILE --method timing` instead."""
    from nsight_agent.errors import CollectionTimeoutError
    from nsight_agent.service import diagnose

    hint = "Raise it, or method='timing' where no counters are needed; clock_control='base'."

    def times_out(*args: Any, **kwargs: Any) -> Any:
        raise CollectionTimeoutError("The run passed its limit.", hint)

    monkeypatch.setattr(diagnose, "diagnose_file", times_out)
    report = Path(__file__).parent / "fixtures" / "h200_bf16_matmul_sections.ncu-rep"
    code, _, err = _run(["diagnose", str(report)], capsys)
    assert code == 1 and not foreign_flags(err, "diagnose"), err
    assert "`nsight-agent profile FILE --method timing`" in err
    assert "`nsight-agent profile FILE --clock-control base`" in err
    monkeypatch.setattr(cli.main.__globals__["commands"], "measure_source", times_out)
    source = tmp_path / "add.py"
    source.write_text(SOURCE)
    code, _, err = _run(["profile", str(source)], capsys)
    assert "or --method timing where" in err and not foreign_flags(err, "profile"), err
