"""Errors a newcomer meets, each said plainly: one error model, two renderings
(MCP calls for an agent, ``nsight-agent`` commands at the command line), refusals that come
before any work, and failures that say so with a non-zero exit."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from nsight_agent import cli
from nsight_agent.arguments import OPTION_KNOBS, TOOL_ARGUMENTS
from nsight_agent.cli.terms import cli_terms
from nsight_agent.request import ProfileRequest

FIXTURES = Path(__file__).parent / "fixtures"
H200_REPORT = FIXTURES / "h200_bf16_matmul_sections.ncu-rep"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- one error model, two renderings -----------------------------------------------------------


@pytest.mark.parametrize(
    ("mcp", "command"),
    [
        (
            "The run's status, logs and error stay readable: get_run(run_id='20261201-1-ab').",
            "The run's status, logs and error stay readable: `nsight-agent runs show 20261201-1-ab`.",
        ),
        (
            "more with get_run(run_id='r1', offset=20, limit=20).",
            "more with `nsight-agent runs show r1 --offset 20 --limit 20`.",
        ),
        (
            "more with summarize_report(path='/a b/r.ncu-rep', offset=2, limit=2).",
            "more with `nsight-agent report '/a b/r.ncu-rep' --offset 2 --limit 2`.",
        ),
        (
            "diagnose_kernel(run_id='r1', offset=3)",
            "`nsight-agent diagnose --run-id r1 --offset 3`",
        ),
        ("a metric bundle (see the list_skills tool)", "a metric bundle (`nsight-agent skills`)"),
        ("get_skill('memory') explains it", "`nsight-agent skills memory` explains it"),
        ("(or the query_metrics tool);", "(or `nsight-agent metrics WORDS`);"),
        (
            "confirm with device_info(probe_counters=true)",
            "confirm with `nsight-agent doctor --probe`",
        ),
        ("lock clocks (clock_control='base')", "lock clocks (--clock-control base)"),
    ],
)
def test_mcp_calls_become_commands(mcp: str, command: str) -> None:
    assert cli_terms(mcp) == command


def _failed_run(root: Path, run_id: str = "20261201-000000-0123456789ab") -> str:
    run = root / run_id
    run.mkdir(parents=True)
    request = ProfileRequest(source="x = 1\n", configs=[{"n": 1}], language="torch")
    (run / "request.json").write_text(request.model_dump_json())
    status = {
        "run_id": run_id,
        "status": "failed",
        "stage": "pre-flight: import",
        "message": "import failed: SyntaxError: invalid syntax (user_source.py, line 1)",
        "error": "SourceError",
    }
    (run / "status.json").write_text(json.dumps(status))
    return run_id


def test_runs_show_of_a_failed_run_says_so_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not "run ... on unknown GPU; kernels: {}" with a clocks warning and exit 0."""
    run_id = _failed_run(tmp_path)
    assert cli.main(["runs", "show", run_id, "--runs-root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"run {run_id} FAILED at pre-flight: import" in out
    assert "SyntaxError" in out
    assert "unknown GPU" not in out and "kernels: {}" not in out and "Clocks" not in out


def test_an_error_hint_names_commands_in_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["skills", "no_such_skill"]) == 2
    assert "No skill named 'no_such_skill'" in capsys.readouterr().err
    assert cli.main(["report", str(H200_REPORT), "--metrics", "dram__bytes_reed.sum"]) == 2
    err = capsys.readouterr().err
    assert "nsight-agent metrics" in err and "query_metrics" not in err


# --- refusals before any work ------------------------------------------------------------------


def test_diagnose_refuses_a_file_that_is_no_source_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused at once, with no run folder: not seconds of work ending in "import failed
    (source line 1): SyntaxError"."""
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", str(tmp_path / "runs"))
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    assert cli.main(["diagnose", str(passwd)]) == 2
    err = capsys.readouterr().err
    assert f"{passwd}, line 1: not Python source" in err and "nothing was run" in err, err
    assert not (tmp_path / "runs").exists()
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert cli.main(["diagnose", str(binary)]) == 2
    assert "neither an Nsight Compute report nor Python source" in capsys.readouterr().err


def test_a_report_without_its_suffix_is_still_diagnosed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    renamed = tmp_path / "matmul.report"
    renamed.write_bytes(H200_REPORT.read_bytes())
    assert cli.main(["diagnose", str(renamed), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kernels_total"] == 1


def test_without_torch_the_cli_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Said before any run, with the command to install it: not "No module named 'torch'"
    from inside a run."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "torch" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", str(tmp_path / "runs"))
    source = tmp_path / "k.py"
    source.write_text("def setup(n, device):\n    return ()\n\ndef run():\n    return None\n")
    assert cli.main(["diagnose", str(source)]) == 1
    err = capsys.readouterr().err
    assert "torch" in err and "pip install torch" in err
    assert "download.pytorch.org/whl/cpu" in err
    assert not (tmp_path / "runs").exists()


def test_an_unknown_metric_asked_of_a_report_is_an_error_with_close_matches(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 2 with close matches, never ignored with exit 0."""
    assert cli.main(["report", str(H200_REPORT), "--metrics", "bogus__metric"]) == 2
    assert "Metric 'bogus__metric' is not in this report" in capsys.readouterr().err
    assert cli.main(["report", str(H200_REPORT), "--metrics", "dram__bytes_reed.sum"]) == 2
    assert "Close matches: dram__bytes_read.sum" in capsys.readouterr().err
    # A real metric the report lacks is shown as absent, not refused.
    assert (
        cli.main(["report", str(H200_REPORT), "--metrics", "dram__bytes_read.sum", "--json"]) == 0
    )
    metrics = json.loads(capsys.readouterr().out)["actions"][0]["metrics"]
    assert metrics["dram__bytes_read.sum"] is None  # asked for, not in the report


# --- a knob at the top level of a tool call ----------------------------------------------------


def test_option_knobs_match_the_options_model() -> None:
    from nsight_agent.server.tools_profile import Options

    assert set(Options.model_fields) == OPTION_KNOBS


@pytest.mark.anyio
async def test_tool_arguments_match_the_tools_that_take_options() -> None:
    from nsight_agent.server.app import build_server

    async with Client(build_server()) as client:
        schemas = [t.input_schema.get("properties", {}) for t in (await client.list_tools()).tools]
    taken = {name for props in schemas if "options" in props for name in props}
    assert taken - {"options"} == TOOL_ARGUMENTS


@pytest.mark.anyio
async def test_a_top_level_knob_is_told_where_it_goes() -> None:
    """Not pydantic's "Extra inputs are not permitted" with a link to its error pages."""
    from nsight_agent.server.app import build_server

    async with Client(build_server()) as client:
        misplaced = {"source": "x", "configs": [{}], "timeout_s": 30, "setup": "make"}
        answer = await client.call_tool("profile_kernel", misplaced)
        assert answer.is_error
        said = answer.content[0].text  # type: ignore[union-attr]
        assert "pass it as options.timeout_s" in said and "pass it as options.setup" in said
        assert "errors.pydantic.dev" not in said and "'make'" not in said
        answer = await client.call_tool("summarize_report", {"path": "x", "sections": ["a"]})
        assert "unknown argument 'sections'\n" in answer.content[0].text  # type: ignore[union-attr]
        answer = await client.call_tool(
            "profile_kernel", {"source": "x", "configs": [{}], "options": {"timeout": 30}}
        )
        assert "did you mean options.timeout_s?" in answer.content[0].text  # type: ignore[union-attr]


def test_an_unknown_option_is_a_problem_with_its_near_miss() -> None:
    from nsight_agent.errors import RequestRejected
    from nsight_agent.server.tools_profile import options_of

    with pytest.raises(RequestRejected) as err:
        options_of({"timout_s": 30})
    said = str(err.value)
    assert "- options.timout_s: is not an option (did you mean options.timeout_s?)" in said


@pytest.mark.parametrize(
    ("query", "offered"),
    [("dram__byts.sum", "dram__bytes.sum"), ("tensor core utilization", "sm__ops_path_tensor")],
)
def test_metrics_says_when_nothing_matches_and_offers_close_names(
    query: str, offered: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["metrics", *query.split()]) == 1
    err = capsys.readouterr().err
    assert f"no metric matches {query!r}" in err and offered in err, err


def test_a_kernel_with_a_syntax_error_is_a_failure_not_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README's table: 1 for a broken kernel (a syntax error in a .py too), 2 for usage."""
    broken = tmp_path / "kernel.py"
    broken.write_text("def setup(n, device):\n    return (\n")
    assert cli.main(["profile", str(broken), "--method", "timing"]) == 1
    err = capsys.readouterr().err
    assert f"{broken}, line 2: syntax error: " in err and "nothing was run" in err, err


def _torch_kernel(folder: Path) -> Path:
    """A contract source of one torch kernel, as a user's file: setup(n, device) and run."""
    source = folder / "k.py"
    source.write_text(
        "import torch\n\ndef setup(n, device):\n    return (torch.ones(n, device=device),)\n\n"
        "def run(x):\n    return x * 2\n"
    )
    return source


def test_forgetting_the_configs_is_a_usage_error_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", str(tmp_path / "runs"))
    source = _torch_kernel(tmp_path)
    assert cli.main(["profile", str(source), "--language", "torch", "--method", "timing"]) == 2
    err = capsys.readouterr().err
    assert "missing 1 required positional argument: 'n'" in err
    assert "--config n=1024" in err and "--grid" in err, err


@pytest.mark.parametrize(
    ("grid", "said"),
    [
        ('{"n": 64}', "grid entry 'n' must be a non-empty list of values"),
        ('{"n": []}', "grid entry 'n' must be a non-empty list of values"),
        ("{}", "configs is an empty grid"),
        ("[]", "--grid gives no configuration"),
    ],
)
def test_a_grid_the_request_would_refuse_is_refused_before_any_run(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    grid: str,
    said: str,
) -> None:
    """The command line expands a grid by the request's own rule (a scalar is not a list of
    values, as over MCP and in the API), and an empty one is not a run of no parameters."""
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", str(tmp_path / "runs"))
    source = tmp_path / "k.py"
    source.write_text("import torch\n\ndef setup(n=8, device='cpu'):\n    return (n,)\n\n")
    argv = ["profile", str(source), "--language", "torch", "--method", "timing"]
    assert cli.main([*argv, "--grid", grid]) == 2
    assert said in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_diagnosing_a_report_refuses_the_flags_of_a_new_run_and_a_bad_page(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A report is read as it was measured: --config or --entry there would be ignored."""
    report = str(H200_REPORT)
    assert cli.main(["diagnose", report, "--config", "n=5", "--entry", "foo"]) == 2
    err = capsys.readouterr().err
    assert "--config, --entry: only a kernel source is profiled" in err, err
    assert cli.main(["diagnose", report, "--limit", "0"]) == 2
    assert "limit: must be >= 1 (got 0)" in capsys.readouterr().err


def test_a_bad_page_or_hint_of_a_source_diagnosis_comes_before_ncu_is_looked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu here, whatever the machine has
    source = _torch_kernel(tmp_path)
    argv = ["diagnose", str(source), "--language", "torch", "--config", "n=64"]
    assert cli.main([*argv, "--offset", "-1", "--ideal-bytes", "-5"]) == 2
    err = capsys.readouterr().err
    assert "offset: must be >= 0 (got -1)" in err and "ideal_bytes: must be a positive" in err
    assert "not found" not in err and "The request has 2 problems" in err, err


def test_a_timeout_below_the_floor_is_refused_as_over_mcp(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", str(tmp_path / "runs"))
    source = _torch_kernel(tmp_path)
    argv = ["profile", str(source), "--language", "torch", "--method", "timing"]
    assert cli.main([*argv, "--config", "n=8", "--timeout", "5"]) == 2
    err = capsys.readouterr().err
    assert "timeout_s" in err and "greater than or equal to 10" in err, err


@pytest.mark.parametrize(
    ("pairs", "config"),
    [
        (["n=64,m=32"], {"n": 64, "m": 32}),
        (["s=a,b"], {"s": "a,b"}),  # a value with a comma, as {"s": "a,b"} over MCP
        (["n=1,s=a,b,m=2"], {"n": 1, "s": "a,b", "m": 2}),
        (["shape=[2,3]", "k=1"], {"shape": [2, 3], "k": 1}),  # the request says what is wrong
    ],
)
def test_a_config_value_may_hold_a_comma(pairs: list[str], config: dict[str, Any]) -> None:
    from nsight_agent.cli.inputs import parse_config

    assert parse_config(pairs) == config
