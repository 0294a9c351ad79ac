"""The `nsight-agent` command on the committed fixtures (no GPU needed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import ncu_report
import pytest

from nsight_agent import cli
from nsight_agent.errors import InvalidRequestError

H200_REPORT = Path(__file__).parent / "fixtures" / "h200_bf16_matmul_sections.ncu-rep"


ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def test_report_json_matches_ncu_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", str(H200_REPORT), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    action = ncu_report.load_report(str(H200_REPORT)).range_by_idx(0).action_by_idx(0)
    got = data["actions"][0]
    assert got["kernel"] == action.name()
    assert got["duration_ns"] == pytest.approx(action["gpu__time_duration.sum"].value(), rel=1e-3)
    assert got["metrics"]["block"] == action["launch__block_size"].value()
    assert data["gpu"] == action["device__attribute_display_name"].value()


def test_report_text_and_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", str(H200_REPORT)]) == 0
    out = capsys.readouterr().out
    assert "nvjet_sm90" in out and "compute-bound" in out
    assert cli.main(["report", "/no/such.ncu-rep"]) == 2
    assert "No report at /no/such.ncu-rep" in capsys.readouterr().err


def test_report_through_the_entry_point() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nsight_agent", "report", str(H200_REPORT), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["kernels_total"] == 1


def test_doctor(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["doctor", "--json"])
    info = json.loads(capsys.readouterr().out)
    assert {"gpus", "ncu_path", "counters", "packages", "unknown"} <= set(info)
    # Exit 0 only where profiling is possible; otherwise 1, and why on stderr.
    assert code == (0 if info["can_profile"] else 1)
    assert cli.main(["doctor"]) == code
    captured = capsys.readouterr()
    assert "counters permitted" in captured.out and "packages" in captured.out
    if shutil.which("ncu") is None:
        assert "ncu: not found" in captured.out and "cannot profile here" in captured.err


def test_config_parsing() -> None:
    assert cli.parse_configs([["M=1024", "dtype=float16"], ["M=2048,dtype=bf16"]], None) == [
        {"M": 1024, "dtype": "float16"},
        {"M": 2048, "dtype": "bf16"},
    ]
    grid = cli.parse_configs(None, '{"M": [1, 2], "BLOCK": [64, 128]}')
    assert grid[0] == {"M": 1, "BLOCK": 64} and len(grid) == 4
    with pytest.raises(InvalidRequestError):
        cli.parse_configs([["M"]], None)
    with pytest.raises(InvalidRequestError):
        cli.parse_configs(None, "{nope")


def test_profile_without_ncu_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("ncu") or os.environ.get("NCU"):
        pytest.skip("ncu is installed here")
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", str(tmp_path / "runs"))
    source = tmp_path / "add.py"
    source.write_text(
        "import torch\n\n"
        "def setup(n, device):\n    return torch.ones(n, device=device), torch.ones(n, device=device)\n\n"
        "def run(x, y):\n    return x + y\n"
    )
    code = cli.main(
        ["profile", str(source), "--language", "torch", "--config", "n=64", "--runs", "1"]
    )
    assert code == 1  # the work could not be done (no profiler), not a usage error
    err = capsys.readouterr().err
    assert "ncu" in err and "--method timing" in err and "Nothing was run" in err


def test_demo_example_passes_the_cpu_preflight(tmp_path: Path) -> None:
    from nsight_agent import demo
    from nsight_agent.engine import pipeline
    from nsight_agent.request import ProfileRequest

    request = ProfileRequest(
        source=demo.EXAMPLE_SOURCE,
        variants=[{"name": "a", "entry": "run"}, {"name": "b", "entry": "torch_eager"}],
        configs=[{"n": 3000}],
        runs=1,
    )
    pre = pipeline.preflight(request, runs_root=tmp_path, device="cpu")
    assert pre.ok, pre.errors
    wrong = ProfileRequest(
        source=demo.EXAMPLE_SOURCE,
        variants=[{"name": "a", "entry": "run"}, {"name": "c", "entry": "forgot_relu"}],
        configs=[{"n": 3000}],
        runs=1,
    )
    flagged = pipeline.preflight(wrong, runs_root=tmp_path, device="cpu")
    assert [c.ok for c in flagged.checks if c.variant == "c"] == [False]


def test_demo_runs_a_real_client_session(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nsight_agent.demo"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**_env(), "NSIGHT_AGENT_RUNS": str(tmp_path / "runs")},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "connected to nsight-agent serve over stdio" in proc.stdout
    if "No GPU profiling here" in proc.stdout:
        assert ">>> summarize_report" in proc.stdout and "NVIDIA H200" in proc.stdout
    else:
        assert ">>> compare_variants" in proc.stdout


@pytest.mark.gpu
def test_profile_and_doctor_on_gpu(tmp_path: Path) -> None:
    """The README's command line, for real: a Triton example profiled under ncu."""
    env = _env() | {"NSIGHT_AGENT_RUNS": str(tmp_path / "runs")}
    source = ROOT / "examples" / "contract" / "triton_vector_add.py"
    argv = [sys.executable, "-m", "nsight_agent", "profile", str(source), "--language", "triton"]
    argv += ["--grid", '{"n": [4096, 1048576]}', "--runs", "3", "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)  # shown by pytest -rA
    answer = json.loads(proc.stdout)
    assert answer["kernels"] == {"run": ["add_kernel"]}
    assert [r["config"] for r in answer["results"]] == [{"n": 4096}, {"n": 1048576}]
    assert all(r["stats"]["gpu__time_duration.sum"]["n"] == 3 for r in answer["results"])

    doctor = [sys.executable, "-m", "nsight_agent", "doctor", "--probe", "--json"]
    proc = subprocess.run(doctor, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["counters"]["permitted"] == "yes"


def test_diagnose_a_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diagnose", str(H200_REPORT), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    top = data["kernels"][0]["diagnosis"]
    assert top["kernel"].startswith("nvjet_sm90") and top["bound"]["bound"] == "compute-bound"
    assert cli.main(["diagnose", str(H200_REPORT)]) == 0
    assert "tensor roof" in capsys.readouterr().out
    assert cli.main(["diagnose"]) != 0
    assert "Give a .ncu-rep, a kernel source file, or a run id" in capsys.readouterr().err


def _cli(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nsight_agent", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        check=False,
        **kwargs,
    )


def test_usage_errors_exit_2_with_a_message_not_a_traceback(tmp_path: Path) -> None:
    source = tmp_path / "k.py"
    source.write_text("def setup(n, device):\n    return ()\n\ndef run():\n    return None\n")
    runs0 = _cli("profile", str(source), "--config", "n=1", "--runs", "0")
    assert runs0.returncode == 2 and "Traceback" not in runs0.stderr
    assert "runs" in runs0.stderr
    bad_metric = _cli(
        "profile", str(source), "--config", "n=1", "--metrics", "dram__bytes_reed.sum"
    )
    assert bad_metric.returncode == 2 and "Close matches: dram__bytes_read.sum" in bad_metric.stderr
    assert _cli("profile").returncode == 2  # argparse: missing file


def test_help_shows_defaults() -> None:
    out = " ".join(_cli("profile", "--help").stdout.split())  # as wrapped at any width
    assert "(default: 5)" in out and "KernelBench problem, cuda for a source with" in out
    assert "CUDA_SOURCE, else triton)" in out


def test_a_closed_pipe_is_quiet() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsight_agent", "report", str(H200_REPORT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "BrokenPipe" not in err and "Traceback" not in err


def test_metrics_skills_and_runs_commands(tmp_path: Path) -> None:
    found = _cli("metrics", "dram", "bytes", "--limit", "3")
    assert found.returncode == 0 and "dram__bytes" in found.stdout
    assert _cli("metrics", "zzzz_no_such_thing").returncode == 1
    skills = _cli("skills")
    assert skills.returncode == 0 and "tensor_cores" in skills.stdout
    assert "## What to try next" in _cli("skills", "memory").stdout
    root = tmp_path / "runs"
    for i in range(3):
        run = root / f"run{i}"
        run.mkdir(parents=True)
        (run / "request.json").write_text("{}")
        (run / "big.bin").write_bytes(b"x" * 1000)
        os.utime(run, (1000 + i, 1000 + i))
    (root / ".cuda-cache").mkdir()
    listed = _cli("runs", "list", "--runs-root", str(root))
    # a header, then one row per run, its id first (`awk 'NR>1 {print $1}'` lists the ids)
    assert [line.split()[0] for line in listed.stdout.splitlines()[1:]] == ["run2", "run1", "run0"]
    pruned = _cli("runs", "prune", "--runs-root", str(root), "--keep", "1")
    assert pruned.returncode == 0 and "removed 2 run(s)" in pruned.stdout
    assert sorted(p.name for p in root.iterdir()) == [".cuda-cache", "run2"]


def test_every_command_and_option_says_what_it_is() -> None:
    """Every command has a description and every option says what it is, not only
    "(default: ...)"."""
    import argparse
    import re

    parser = cli.build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subs.choices.items():
        assert sub.description, f"{name} --help has no description"
        for action in sub._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            said = re.sub(r"\(default: [^)]*\)", "", action.help or "").strip()
            assert said, f"{name} {action.option_strings[0]} has no help text"
    serve = _cli("serve", "--help").stdout
    assert "Run nsight-agent as an MCP server" in serve and "HTTP: port to listen on" in serve


def test_doctor_says_how_to_install_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    from nsight_agent.engine import device

    info = device.device_info()
    cli.main(["doctor"])
    out = capsys.readouterr().out
    for name, version in info.packages.items():
        if version == "not installed":
            assert f"install {name}" in out
    if info.ncu_path is None:
        assert "install ncu: install Nsight Compute" in out


def test_a_cuda_source_is_refused_before_compiling_on_a_machine_without_a_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from nsight_agent.engine import pinning

    monkeypatch.setattr(pinning, "has_gpu", lambda: False)
    monkeypatch.setenv("NSIGHT_AGENT_RUNS", str(tmp_path))
    example = Path(__file__).parents[1] / "examples" / "contract" / "cuda_vector_add.py"
    argv = ["profile", str(example), "--language", "cuda", "--method", "timing"]
    assert cli.main([*argv, "--config", "n=1024"]) == 1
    err = capsys.readouterr().err
    assert "runs only on an NVIDIA GPU" in err and "nothing was compiled" in err, err
    assert not list(tmp_path.iterdir())  # no run folder, no build
