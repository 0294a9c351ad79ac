"""Fault injection through the SDK's in-process client: bad requests of every kind across the
tools get a specific error (never the bare "Error executing tool NAME"), the next valid call
on the same session succeeds, and no child process is left (found by the environment marker
``NSIGHT_AGENT_CHILD``, not by parentage). No GPU: sources run on the CPU with torch, and a
stand-in ncu runs the harness without profiling where the ncu stage is needed.

The counts of the whole file (bad requests tried, specific errors, generic errors, processes
left) are printed by the last test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent

from nsight_agent.engine import children
from nsight_agent.errors import NcuNotFoundError
from nsight_agent.server.app import build_server

pytestmark = pytest.mark.anyio

FIXTURE = Path(__file__).parent / "fixtures" / "h200_bf16_matmul_sections.ncu-rep"
COUNTS = {"tried": 0, "specific": 0, "generic": 0, "left": 0}
BARE = "Error executing tool"

GOOD = """
import torch

def setup(n, device):
    return (torch.ones(n, device=device),)

def run(x):
    return x * 2
"""


def both(**knobs: Any) -> dict[str, Any]:
    """Advanced knobs go inside ``options`` (a top-level one is refused by name, below)."""
    return {"options": knobs}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


TIMING = {"method": "timing"}


@pytest.fixture
def no_ncu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever this machine has, the tools see no ncu: a call that needs it fails at once, so
    these tests take the timing path (``TIMING``), whose pre-flight runs the harness on the CPU
    on the server's warm worker."""

    def missing() -> str:
        raise NcuNotFoundError("Nsight Compute (ncu) was not found (test).", "Install it.")

    monkeypatch.setattr("nsight_agent.engine.collection.ncu.find_ncu", missing)


STAND_IN_NCU = """#!{python}
# Runs the harness the way ncu would, without profiling: on the CPU, no report written.
import os, subprocess, sys
argv = sys.argv[1:]
open(argv[argv.index("--log-file") + 1], "w").close()
target = argv[argv.index({python!r}):]
target = ["cpu" if a == "cuda" else a for a in target]
sys.exit(subprocess.call(target, env=dict(os.environ, TRITON_INTERPRET="1")))
"""


@pytest.fixture
def stand_in_ncu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    ncu = tmp_path / "ncu"
    ncu.write_text(STAND_IN_NCU.format(python=sys.executable))
    ncu.chmod(0o755)
    monkeypatch.setenv("NCU", str(ncu))
    monkeypatch.setattr("nsight_agent.engine.pipeline._default_device", lambda: "cpu")
    return ncu


def _text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def left_behind() -> dict[int, str]:
    """Live processes carrying this test process's marker (children of any of its calls),
    except the servers' warm workers, which live as long as their server. Waits on that state;
    the deadline only bounds a failure, and is wide for a loaded CI machine."""
    deadline = time.monotonic() + 30
    while True:
        found = {
            pid: marker
            for pid, marker in children.marked_processes(children.owner_prefix()).items()
            if "-worker-" not in marker
        }
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


async def expect_error(client: Client, tool: str, args: dict[str, Any], *needles: str) -> str:
    """One bad request: a specific error naming ``needles``, then a valid call that works,
    and no process left."""
    COUNTS["tried"] += 1
    result = await client.call_tool(tool, args)
    text = _text(result)
    generic = (not result.is_error) or (text.strip().startswith(BARE) and ":" not in text)
    missing = [n for n in needles if n.lower() not in text.lower()]
    if generic or missing:
        COUNTS["generic"] += 1
    else:
        COUNTS["specific"] += 1
    assert result.is_error, f"{tool} {args!r} did not fail: {text[:300]}"
    assert not missing, f"{tool}: {missing} not in: {text[:1500]}"
    assert text.strip() != f"{BARE} {tool}"
    after = await client.call_tool("list_skills", {})
    assert not after.is_error, _text(after)
    left = left_behind()
    COUNTS["left"] += len(left)
    assert not left, left
    return text


async def expect_resource_error(client: Client, uri: str, *needles: str) -> str:
    COUNTS["tried"] += 1
    with pytest.raises(Exception) as info:
        await client.read_resource(uri)
    text = str(info.value)
    missing = [n for n in needles if n.lower() not in text.lower()]
    COUNTS["generic" if missing else "specific"] += 1
    assert not missing, f"{uri}: {missing} not in {text}"
    after = await client.call_tool("summarize_report", {"path": str(FIXTURE)})
    assert not after.is_error, _text(after)
    return text


# ---------------------------------------------------------------------------------------------
# Broken sources: the CPU pre-flight reports each with its stage (ncu absent)

BROKEN_SOURCES: list[tuple[str, str, dict[str, Any], tuple[str, ...]]] = [
    ("import", "import no_such_module_xyz\n" + GOOD, {}, ("import failed", "no_such_module_xyz")),
    (
        "setup raises",
        GOOD.replace("return (torch.ones", "raise ValueError('bad setup')\n    return (t"),
        {},
        ("setup failed", "bad setup"),
    ),
    (
        "entry raises",
        GOOD.replace("return x * 2", "raise RuntimeError('entry boom')"),
        {},
        ("entry failed", "entry boom"),
    ),
    ("os._exit at import", "import os\nos._exit(0)\n" + GOOD, {}, ("wrote no manifest",)),
    (
        "os._exit in entry",
        GOOD.replace("return x * 2", "import os\n    os._exit(0)"),
        {},
        ("recorded only 0 of", "os._exit"),
    ),
    # at the stage it happened in, not blamed on the entry
    (
        "sys.exit at import",
        "import sys\nsys.exit(3)\n" + GOOD,
        {},
        ("import failed", "SystemExit: 3"),
    ),
    (
        "KeyboardInterrupt at import",
        "raise KeyboardInterrupt\n" + GOOD,
        {},
        ("import failed (source line 1)", "KeyboardInterrupt"),
    ),
    (
        "sys.exit in entry",
        GOOD.replace("return x * 2", "import sys\n    sys.exit(3)"),
        {},
        ("entry failed", "SystemExit"),
    ),
    (
        "kill -9 itself",
        GOOD.replace("return x * 2", "import os, signal\n    os.kill(os.getpid(), 9)"),
        {},
        ("died without an error report", "exit status -9"),
    ),
]


@pytest.mark.parametrize(
    ("source", "extra", "needles"),
    [pytest.param(s, e, n, id=i) for i, s, e, n in BROKEN_SOURCES],
)
async def test_broken_sources(
    runs: Path, no_ncu: None, source: str, extra: dict[str, Any], needles: tuple[str, ...]
) -> None:
    async with Client(build_server(runs)) as client:
        args = {"source": source, "configs": [{"n": 8}], "language": "torch", "runs": 1, **extra}
        args |= TIMING
        text = await expect_error(client, "profile_kernel", args, *needles)
    assert "(run 2" in text  # the run id is in the error answer
    run_id = text.split("(run ", 1)[1].split(")", 1)[0]
    status = json.loads((runs / run_id / "status.json").read_text())
    assert status["status"] == "failed" and status["stage"].startswith("pre-flight")


async def test_hanging_source_is_killed_at_its_limit_and_the_run_says_timed_out(
    runs: Path, no_ncu: None
) -> None:
    hang = GOOD.replace(
        "return x * 2",
        # A grandchild in its own session: outside the process group, found by its marker.
        "import subprocess, time\n    subprocess.Popen(['sleep', '300'], "
        "start_new_session=True)\n    while True: time.sleep(0.1)",
    )
    async with Client(build_server(runs)) as client:
        text = await expect_error(
            client,
            "profile_kernel",
            {
                "source": hang,
                "configs": [{"n": 8}],
                "language": "torch",
                **both(timeout_s=10),
                **TIMING,
            },
            "ran past its 10 s limit",
        )
        run_id = text.split("(run ", 1)[1].split(")", 1)[0]
        got = await client.call_tool("get_run", {"run_id": run_id})
    status = json.loads((runs / run_id / "status.json").read_text())
    assert status["status"] == "timed_out" and status["stage"] == "pre-flight"
    # A failed run can still be read: its status and what it left.
    assert "timed_out" in _text(got), _text(got)


# ---------------------------------------------------------------------------------------------
# Bad requests that never reach a process


def _many(n: int) -> list[dict[str, int]]:
    return [{"n": i} for i in range(n)]


BAD_REQUESTS: list[tuple[str, str, dict[str, Any], tuple[str, ...]]] = [
    ("configs []", "profile_kernel", {"configs": []}, ("configs is empty",)),
    ("configs {}", "profile_kernel", {"configs": {}}, ("empty grid",)),
    ("grid of empty lists", "profile_kernel", {"configs": {"n": [], "m": []}}, ("non-empty",)),
    ("non-dict items", "profile_kernel", {"configs": [1, 2]}, ("configs",)),
    (
        "huge grid",
        "profile_kernel",
        {"configs": {"a": list(range(20)), "b": list(range(20))}},
        ("400 configurations", "limit is 64"),
    ),
    ("65 configs", "profile_kernel", {"configs": _many(65)}, ("limit is 64",)),
    ("mixed keys", "profile_kernel", {"configs": [{"n": 1}, {"m": 2}]}, ("same parameters",)),
    ("reserved key", "profile_kernel", {"configs": [{"device": "cpu"}]}, ("reserved",)),
    ("list value", "profile_kernel", {"configs": [{"n": [1, 2]}]}, ("values must be numbers",)),
    ("bad key", "profile_kernel", {"configs": [{"1n": 2}]}, ("not a Python identifier",)),
    ("option-like value", "profile_kernel", {"configs": [{"n": "--x"}]}, ("option",)),
    ("runs=0", "profile_kernel", {"runs": 0}, ("runs", "greater than or equal to 1")),
    ("runs<0", "profile_kernel", {"runs": -3}, ("runs", "greater than or equal to 1")),
    ("runs huge", "profile_kernel", {"runs": 10**6}, ("runs", "less than or equal to 100")),
    ("warmup<0", "profile_kernel", both(warmup=-1), ("warmup",)),
    (
        "timeout low",
        "profile_kernel",
        both(timeout_s=1),
        ("timeout_s", "greater than or equal"),
    ),
    (
        "timeout high",
        "profile_kernel",
        both(timeout_s=10**7),
        ("timeout_s", "less than or equal"),
    ),
    (
        "unknown metric",
        "profile_kernel",
        {"metrics": ["dram__bytes.summ"]},
        ("dram__bytes.summ", "dram__bytes.sum", "Hint"),
    ),
    ("malformed metric", "profile_kernel", {"metrics": ["a b"]}, ("a b",)),
    (
        "knob outside options",
        "profile_kernel",
        {"timeout_s": 30},
        ("timeout_s", "pass it as options.timeout_s"),
    ),
    ("unknown option", "profile_kernel", both(timout_s=30), ("timout_s", "is not an option")),
    # What the source's text shows is refused before anything runs (the ncu check included).
    (
        "syntax error",
        "profile_kernel",
        {"source": "def setup(n, device)\n    return ()\n"},
        ("source, line 1: syntax error: expected ':'",),
    ),
    (
        "no entry",
        "profile_kernel",
        {"source": GOOD.replace("def run(", "def other(")},
        ("defines no function 'run'",),
    ),
    (
        "no setup",
        "profile_kernel",
        {"source": GOOD.replace("def setup(", "def make(")},
        ("defines no function 'setup'",),
    ),
    ("wrong entry name", "profile_kernel", {"entry": "missing_fn"}, ("'missing_fn'",)),
    ("unknown skill", "profile_kernel", {"skill": "nope"}, ("No skill named 'nope'",)),
    (
        "unknown section",
        "profile_kernel",
        both(sections=["SpeedOfLite"]),
        ("Unknown section", "SpeedOfLight"),
    ),
    ("unknown language", "profile_kernel", {"language": "fortran"}, ("language",)),
    ("option entry", "profile_kernel", {"entry": "-rf"}, ("identifier",)),
    (
        "oversized source",
        "profile_kernel",
        {"source": "#" * (20 * 2**20)},
        ("20.0 MiB", "limit is 4 MiB"),
    ),
    (
        "one variant",
        "compare_variants",
        {"variants": [{"name": "a"}], "configs": [{"n": 8}]},
        ("at least two variants",),
    ),
    (
        "duplicate variants",
        "compare_variants",
        {"source": GOOD, "variants": [{"name": "a"}, {"name": "a"}], "configs": [{"n": 8}]},
        ("unique",),
    ),
    (
        "unknown baseline",
        "compare_variants",
        {
            "source": GOOD,
            "variants": [{"name": "a"}, {"name": "b"}],
            "configs": [{"n": 8}],
            "baseline": "zz",
        },
        ("baseline",),
    ),
    ("compare runs=1", "compare_variants", {"runs": 1}, ("runs",)),
    ("run id ../x", "get_run", {"run_id": "../x"}, ("malformed run id",)),
    ("run id /etc", "get_run", {"run_id": "/etc"}, ("malformed run id",)),
    ("run id .cuda-cache", "get_run", {"run_id": ".cuda-cache"}, ("malformed run id",)),
    ("run id unknown", "get_run", {"run_id": "20200101-000000-abcdef"}, ("No finished run",)),
    ("rows of ../..", "get_run_rows", {"run_id": "../../etc"}, ("malformed run id",)),
    ("rows table", "get_run_rows", {"run_id": "x", "table": "secret"}, ("table",)),
    ("plot traversal", "plot_run", {"run_id": "..%2Fx"}, ("malformed run id",)),
    ("compare run id", "compare_variants", {"run_id": "../x"}, ("malformed run id",)),
    ("roofline run id", "roofline_metrics", {"run_id": "/etc/passwd"}, ("malformed run id",)),
    ("diagnose run id", "diagnose_kernel", {"run_id": ".."}, ("malformed run id",)),
    ("roofline nothing", "roofline_metrics", {}, ("needs source (and configs)",)),
    ("diagnose nothing", "diagnose_kernel", {}, ("needs source (and configs)",)),
    (
        "report /etc/passwd",
        "summarize_report",
        {"path": "/etc/passwd"},
        ("not an Nsight Compute report",),
    ),
    ("report folder", "summarize_report", {"path": "/tmp"}, ("is a folder",)),
    ("report missing", "summarize_report", {"path": "/no/such.ncu-rep"}, ("No report at",)),
    ("report limit", "summarize_report", {"path": str(FIXTURE), "limit": 0}, ("limit",)),
    (
        "roofline /etc/passwd",
        "roofline_metrics",
        {"report_path": "/etc/passwd"},
        ("not an Nsight Compute report",),
    ),
    (
        "diagnose /etc/passwd",
        "diagnose_kernel",
        {"report_path": "/etc/passwd"},
        ("not an Nsight Compute report",),
    ),
    ("query limit", "query_metrics", {"query": "dram", "limit": 1000}, ("limit",)),
    ("get_skill unknown", "get_skill", {"name": "nope"}, ("No skill named",)),
    ("get_skill traversal", "get_skill", {"name": "../../etc"}, ("No skill named",)),
    ("device_info type", "device_info", {"probe_counters": "maybe"}, ("probe_counters",)),
]


@pytest.mark.parametrize(
    ("tool", "args", "needles"), [pytest.param(t, a, n, id=i) for i, t, a, n in BAD_REQUESTS]
)
async def test_bad_requests(
    runs: Path, tool: str, args: dict[str, Any], needles: tuple[str, ...]
) -> None:
    if tool == "profile_kernel":
        args = {"source": GOOD, "configs": [{"n": 8}], "language": "torch", **args}
    async with Client(build_server(runs)) as client:
        await expect_error(client, tool, args, *needles)
    assert not (runs.exists() and any(runs.iterdir())), "a refused request made a run folder"


@pytest.fixture
def bad_reports(tmp_path: Path) -> dict[str, Path]:
    data = FIXTURE.read_bytes()
    files = {
        "empty": b"",
        "random": os.urandom(4096),
        "truncated": data[: len(data) // 2],
        "one byte short": data[:-1],
        "magic only": b"NVR\0",
    }
    out = {}
    for name, content in files.items():
        path = tmp_path / f"{name.replace(' ', '_')}.ncu-rep"
        path.write_bytes(content)
        out[name] = path
    return out


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("empty", "empty"),
        ("random", "not an Nsight Compute report"),
        ("truncated", "truncated"),
        ("one byte short", "truncated"),
        ("magic only", "truncated"),
    ],
)
@pytest.mark.parametrize("tool", ["summarize_report", "roofline_metrics", "diagnose_kernel"])
async def test_non_reports(
    runs: Path, bad_reports: dict[str, Path], name: str, needle: str, tool: str
) -> None:
    key = "path" if tool == "summarize_report" else "report_path"
    async with Client(build_server(runs)) as client:
        await expect_error(client, tool, {key: str(bad_reports[name])}, needle)


async def test_resource_uris(runs: Path, sweep: Any) -> None:
    run = sweep.run(runs)
    (runs / ".cuda-cache").mkdir()
    async with Client(build_server(runs)) as client:
        for uri, needle in [
            ("nsight-agent://runs/../x/report", ""),
            ("nsight-agent://runs/.cuda-cache/report", "malformed run id"),
            ("nsight-agent://runs/..%2F..%2Fetc/passwd", ""),
            (f"nsight-agent://runs/{run.run_id}/..%2F..%2Fetc%2Fpasswd", "Unknown resource"),
            (f"nsight-agent://runs/{run.run_id}/nothing", "no artifact"),
            ("nsight-agent://runs/20200101-000000-abcdef/report", "No finished run"),
        ]:
            text = await expect_resource_error(client, uri, needle)
            assert "root:" not in text
        listing = await client.read_resource("nsight-agent://runs")
    runs_listed = json.loads(getattr(listing.contents[0], "text", "{}"))["runs"]
    assert runs_listed == [run.run_id]  # .cuda-cache is not a run


# ---------------------------------------------------------------------------------------------
# Storage: the runs folder is a file, unwritable; run ids never collide


async def test_runs_root_that_is_a_file(tmp_path: Path, no_ncu: None) -> None:
    root = tmp_path / "file"
    root.write_text("not a folder")
    async with Client(build_server(root / "runs")) as client:
        await expect_error(
            client,
            "profile_kernel",
            {"source": GOOD, "configs": [{"n": 8}], "language": "torch", **TIMING},
            "is a file, not a folder",
            "NSIGHT_AGENT_RUNS",
        )


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
async def test_unwritable_runs_folder(tmp_path: Path, no_ncu: None) -> None:
    root = tmp_path / "ro"
    root.mkdir(mode=0o500)
    async with Client(build_server(root / "runs")) as client:
        await expect_error(
            client,
            "profile_kernel",
            {"source": GOOD, "configs": [{"n": 8}], "language": "torch", **TIMING},
            "not writable",
        )


async def test_unwritable_runs_folder_as_seen_by_the_store(
    tmp_path: Path, no_ncu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same error when the OS refuses (also as root: the refusal is simulated)."""
    from pathlib import Path as P

    real_mkdir = P.mkdir

    def refuse(self: P, *args: Any, **kwargs: Any) -> None:
        if "runs" in self.parts:
            raise PermissionError(13, "Permission denied", str(self))
        real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(P, "mkdir", refuse)
    async with Client(build_server(tmp_path / "runs")) as client:
        await expect_error(
            client,
            "profile_kernel",
            {"source": GOOD, "configs": [{"n": 8}], "language": "torch", **TIMING},
            "not writable",
            "Permission denied",
        )


async def test_unexpected_errors_name_the_stage(
    runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("planted")

    monkeypatch.setattr("nsight_agent.engine.collection.extract.iter_actions", broken)
    async with Client(build_server(runs)) as client:
        text = await expect_error(
            client,
            "summarize_report",
            {"path": str(FIXTURE)},
            "internal error while",
            "KeyError",
            "planted",
        )
    assert "in judge.reading" in text, text  # the innermost stage of this package


# ---------------------------------------------------------------------------------------------
# The ncu stage: early exits and incomplete manifests, with a stand-in ncu


async def test_early_exit_under_ncu_is_an_error(runs: Path, stand_in_ncu: Path) -> None:
    # Exits only when not in the pre-flight: the pre-flight passes, the "ncu" run ends early.
    source = GOOD.replace(
        "return x * 2",
        "import os\n    if not os.environ.get('NSIGHT_AGENT_PREFLIGHT'):\n        os._exit(0)\n"
        "    return x * 2",
    )
    async with Client(build_server(runs)) as client:
        text = await expect_error(
            client,
            "profile_kernel",
            {"source": source, "configs": [{"n": 8}], "language": "torch", "runs": 2},
            "recorded only 0 of 2",
        )
    run_id = text.split("(run ", 1)[1].split(")", 1)[0]
    status = json.loads((runs / run_id / "status.json").read_text())
    assert status["status"] == "failed" and status["stage"].startswith("ncu")


async def test_cancel_in_the_middle_of_the_ncu_run(runs: Path, stand_in_ncu: Path) -> None:
    source = GOOD.replace(
        "return x * 2",
        "import os, subprocess, time\n    if not os.environ.get('NSIGHT_AGENT_PREFLIGHT'):\n"
        "        subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "        time.sleep(300)\n    return x * 2",
    )
    COUNTS["tried"] += 1
    async with Client(build_server(runs)) as client:
        with anyio.move_on_after(12):
            await client.call_tool(
                "profile_kernel",
                {"source": source, "configs": [{"n": 8}], "language": "torch", "runs": 1},
            )
        # The harness under "ncu" and its escaped grandchild are gone within seconds.
        left = left_behind()
        after = await client.call_tool("summarize_report", {"path": str(FIXTURE)})
    COUNTS["left"] += len(left)
    assert not left, left
    assert not after.is_error
    statuses = [json.loads((d / "status.json").read_text()) for d in runs.iterdir()]
    assert [s["status"] for s in statuses] == ["cancelled"], statuses
    COUNTS["specific"] += 1


async def test_cancel_during_the_preflight_leaves_nothing(runs: Path, no_ncu: None) -> None:
    source = GOOD.replace("return x * 2", "import time\n    time.sleep(300)")
    async with Client(build_server(runs)) as client:
        with anyio.move_on_after(8):
            await client.call_tool(
                "profile_kernel",
                {"source": source, "configs": [{"n": 8}], "language": "torch", **TIMING},
            )
        left = left_behind()
        assert not left, left
        assert not (await client.call_tool("list_skills", {})).is_error
    (status,) = [json.loads((d / "status.json").read_text()) for d in runs.iterdir()]
    assert status["status"] == "cancelled" and status["stage"] == "pre-flight"


async def test_cancel_during_a_warm_preflight_kills_the_worker(
    runs: Path, stand_in_ncu: Path
) -> None:
    """With ncu present the pre-flight runs on the server's warm worker: a cancel kills that
    worker at once, the run is recorded cancelled, and the next call gets a new worker."""
    source = GOOD.replace("return x * 2", "import time\n    time.sleep(300)")
    async with Client(build_server(runs)) as client:
        with anyio.move_on_after(10):
            await client.call_tool(
                "profile_kernel",
                {"source": source, "configs": [{"n": 8}], "language": "torch", **TIMING},
            )
        deadline = time.monotonic() + 30
        while children.marked_processes(children.owner_prefix()) and time.monotonic() < deadline:
            await anyio.sleep(0.1)
        assert not children.marked_processes(children.owner_prefix())  # the worker too
        after = await client.call_tool(
            "profile_kernel",
            {
                "source": "import no_such_module_xyz\n" + GOOD,
                "configs": [{"n": 8}],
                "language": "torch",
            },
        )
        assert after.is_error and "import failed" in _text(after)
    statuses = sorted(
        (json.loads((d / "status.json").read_text()) for d in runs.iterdir()),
        key=lambda s: s["status"],
    )
    assert [(s["status"], s["stage"]) for s in statuses] == [
        ("cancelled", "pre-flight"),
        ("failed", "pre-flight: import"),
    ]


# ---------------------------------------------------------------------------------------------
# 8 mixed calls at once on one session


async def test_eight_mixed_concurrent_calls(runs: Path, no_ncu: None, sweep: Any) -> None:
    run = sweep.run(runs)
    calls: list[tuple[str, dict[str, Any], bool]] = [
        ("list_skills", {}, True),
        ("summarize_report", {"path": str(FIXTURE)}, True),
        ("query_metrics", {"query": "dram bytes"}, True),
        ("get_run", {"run_id": run.run_id}, True),
        ("summarize_report", {"path": "/etc/passwd"}, False),
        ("get_run", {"run_id": "../x"}, False),
        ("profile_kernel", {"source": "def (", "configs": [{"n": 1}], "language": "torch"}, False),
        ("profile_kernel", {"source": GOOD, "configs": [{"n": 8}], "language": "torch"}, False),
    ]
    results: dict[int, CallToolResult] = {}
    async with Client(build_server(runs)) as client:

        async def one(i: int, tool: str, args: dict[str, Any]) -> None:
            results[i] = await client.call_tool(tool, args)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for i, (tool, args, _) in enumerate(calls):
                    tg.start_soon(one, i, tool, args)
    for i, (tool, _, ok) in enumerate(calls):
        text = _text(results[i])
        assert results[i].is_error is not ok, f"{tool}: {text[:400]}"
        assert text.strip() != f"{BARE} {tool}"
    assert 'method="timing"' in _text(results[7])  # no ncu here: said at once, with the way on
    assert not left_behind()


# ---------------------------------------------------------------------------------------------
# The stdio server: stdin closed, SIGTERM, SIGKILL: no child is left


def _start_server(tmp_path: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, NSIGHT_AGENT_RUNS=str(tmp_path / "runs"), NCU="/nonexistent")
    env["PATH"] = "/usr/bin:/bin"  # no ncu: the call runs the CPU pre-flight
    code = "from nsight_agent.server.app import serve; serve()"
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
    )


def _send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
    proc.stdin.flush()


@pytest.fixture
def hanging_server(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = _start_server(tmp_path)
    init = {"protocolVersion": "2025-06-18", "capabilities": {}}
    _send(proc, {"id": 1, "method": "initialize", "params": {**init, "clientInfo": {
        "name": "faults", "version": "1"}}})  # fmt: skip
    assert proc.stdout is not None and b'"id":1' in proc.stdout.readline()
    _send(proc, {"method": "notifications/initialized"})
    hang = GOOD.replace(
        "return x * 2",
        "import subprocess, time\n    subprocess.Popen(['sleep', '300'], "
        "start_new_session=True)\n    time.sleep(300)",
    )
    # No ncu where the server runs: the timing path's pre-flight hangs on the warm worker.
    args = {"source": hang, "configs": [{"n": 8}], "language": "torch", "method": "timing"}
    _send(proc, {"id": 2, "method": "tools/call", "params": {"name": "profile_kernel",
                                                            "arguments": args}})  # fmt: skip
    deadline = time.monotonic() + 60
    while len(children.marked_processes(children.owner_prefix(proc.pid))) < 2:
        assert time.monotonic() < deadline, "the harness and its grandchild never started"
        time.sleep(0.2)
    yield proc
    proc.kill()
    children.kill_marked(children.owner_prefix(proc.pid))


def _gone(pid: int) -> dict[int, str]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = children.marked_processes(children.owner_prefix(pid))
        if not found:
            return {}
        time.sleep(0.1)
    return children.marked_processes(children.owner_prefix(pid))


@pytest.mark.parametrize("how", ["stdin closed", "SIGTERM", "SIGINT", "SIGKILL"])
def test_server_end_leaves_no_process(hanging_server: subprocess.Popen[bytes], how: str) -> None:
    proc = hanging_server
    if how == "stdin closed":
        assert proc.stdin is not None
        proc.stdin.close()
    elif how == "SIGKILL":
        proc.kill()
    else:
        proc.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGINT)
    proc.wait(timeout=20)
    left = _gone(proc.pid)
    if how == "SIGKILL":
        # The parent-death signal ends the harness; its escaped grandchild is reaped by the
        # next server's start (reap_orphans), as here.
        children.reap_orphans()
        left = _gone(proc.pid)
    COUNTS["left"] += len(left)
    assert not left, left


def test_counts() -> None:
    """The fault suite's tally: every bad request tried got a specific error, none left a process.

    Alone (no bad request tried before it) it has nothing to count, and says so by skipping
    rather than passing on 0/0/0."""
    print(
        f"\nfault suite: bad requests tried {COUNTS['tried']}, specific errors "
        f"{COUNTS['specific']}, generic errors {COUNTS['generic']}, processes left "
        f"{COUNTS['left']}"
    )
    if COUNTS["tried"] == 0:
        pytest.skip("no bad request ran before the tally (run the whole file)")
    assert COUNTS["specific"] + COUNTS["generic"] == COUNTS["tried"], COUNTS
    assert COUNTS["specific"] > 0 and COUNTS["generic"] == 0 and COUNTS["left"] == 0
