"""The MCP server with ``executor="ray"`` against a real local Ray cluster with two logical
GPUs (no GPU needed): tool calls through the SDK's client become Ray tasks that run the real
pre-flight and a stand-in ncu (the harness on the CPU, no report). Two calls at once run on
two GPUs and their run folders land in the server's store; a cancel from the client kills
the task; a worker lost twice is reported by name. ``pytest -m ray`` runs only these.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

ray = pytest.importorskip("ray", reason='Ray is not installed (pip install ".[ray]" in a clone)')

from mcp import Client  # noqa: E402
from mcp.types import CallToolResult, TextContent  # noqa: E402

from nsight_agent.engine import children  # noqa: E402
from nsight_agent.server.app import build_server  # noqa: E402
from tests.fixture_reports import unpacked  # noqa: E402
from tests.test_engine_ray_executor import (  # noqa: E402
    KILLS_WORKER,
    MEETS,
    SLEEPS,
    SOURCE,
    WAIT_S,
    init_two_gpu_cluster,
)
from tests.test_faults import STAND_IN_NCU  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.anyio, pytest.mark.timeout(1800)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# Beside the stand-in ncu's run of the harness: a source carrying this marker gets a real report
# recorded on the H200 with diagnose_kernel's first-pass collection (a probe whose first-pass
# diagnosis asks for a second pass), so diagnose_kernel can go on to its second pass.
WRITES_REPORT = "# stand-in ncu: write the recorded report"
RECORDED = Path(__file__).parent / "fixtures" / "probes" / "probe_sfu_first_pass.ncu-rep.xz"
REPORT_TOO = """
import glob, shutil
run_dir = os.path.dirname(next(a for a in target if a.endswith(".py")))
if any({marker!r} in open(f).read() for f in glob.glob(os.path.join(run_dir, "*.py"))):
    export = argv[argv.index("--export") + 1]
    shutil.copy({planted!r}, export if export.endswith(".ncu-rep") else export + ".ncu-rep")
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Ray's workers inherit this environment: the stand-in ncu is their ncu."""
    ncu = tmp_path_factory.mktemp("ncu") / "ncu"
    stand_in = STAND_IN_NCU.format(python=sys.executable)
    head, call = stand_in.rsplit("sys.exit(", 1)
    report_too = REPORT_TOO.format(marker=WRITES_REPORT, planted=str(unpacked(RECORDED)))
    ncu.write_text(f"{head}rc = {call.strip()[:-1]}\n{report_too}\nsys.exit(rc)\n")
    ncu.chmod(0o755)
    before = os.environ.get("NCU")
    os.environ["NCU"] = str(ncu)
    if ray.is_initialized():
        ray.shutdown()
    init_two_gpu_cluster()
    try:
        yield
    finally:
        ray.shutdown()
        if before is None:
            os.environ.pop("NCU", None)
        else:
            os.environ["NCU"] = before


def _text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def _args(prelude: str) -> dict[str, Any]:
    return {
        "source": SOURCE.format(prelude=prelude),
        "language": "torch",
        "configs": [{"n": 64}],
        "runs": 1,
        "options": {"warmup": 0, "timeout_s": 2 * WAIT_S},  # a bound on a hang, not a measure
    }


def _run_id(result: CallToolResult) -> str:
    content = result.structured_content or {}
    if content.get("run_id"):
        return str(content["run_id"])
    return _text(result).split("(run ", 1)[1].split(")", 1)[0]


async def test_two_calls_at_once_run_on_two_gpus_and_land_in_the_store(
    cluster: None, tmp_path: Path
) -> None:
    results: list[CallToolResult] = []
    flags = tmp_path.parent / f"{tmp_path.name}-flags"  # outside the runs root
    flags.mkdir()
    async with Client(build_server(tmp_path, executor="ray")) as client:

        async def one(me: str, other: str) -> None:
            prelude = MEETS.format(folder=str(flags), me=me, other=other, wait=WAIT_S)
            results.append(await client.call_tool("profile_kernel", _args(prelude)))

        start = time.monotonic()
        async with anyio.create_task_group() as tg:  # the two jobs meet: they ran at once
            tg.start_soon(one, "a", "b")
            tg.start_soon(one, "b", "a")
        wall = time.monotonic() - start
        ids = [_run_id(r) for r in results]
        where = [json.loads((tmp_path / i / "where.json").read_text()) for i in ids]
        assert sorted(w["gpu"] for w in where) == ["0", "1"], where
        (a, b) = [(w["started"], w["ended"]) for w in where]
        assert a[0] < b[1] and b[0] < a[1], f"the jobs did not overlap: {a} {b}"
        for run_id in ids:  # the pre-flight's files and the run record came back
            folder = tmp_path / run_id
            assert (folder / "status.json").is_file() and (folder / "harness.py").is_file()
            assert (folder / "preflight-manifest.json").is_file()
            got = await client.call_tool("get_run", {"run_id": run_id})
            assert run_id in _text(got), _text(got)
    print(f"two calls that met (pre-flight, stand-in ncu): {wall:.1f} s")


async def test_a_cancel_from_the_client_kills_the_ray_task(cluster: None, tmp_path: Path) -> None:
    flag = tmp_path.parent / f"{tmp_path.name}-sleeping"
    prelude = f"open({str(flag)!r}, 'w').close()\n" + SLEEPS.format(seconds=120)
    async with Client(build_server(tmp_path, executor="ray")) as client:
        # Cancelled once the harness sleeps on its host (the host and its worker start on
        # demand first, however long that takes), not after a fixed time.
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "profile_kernel", _args(prelude))
            with anyio.fail_after(WAIT_S):
                while not flag.exists():
                    await anyio.sleep(0.1)
            tg.cancel_scope.cancel()
        info: dict[str, Any] = {}
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            got = await client.call_tool("device_info", {})
            info = (got.structured_content or {}).get("pool") or {}
            if info.get("running") == 0:
                break
            await anyio.sleep(0.5)
        assert info.get("running") == 0 and info.get("queued") == 0, info
    # The cancelled run came back from the node into the server's store, marked cancelled.
    statuses = [json.loads((d / "status.json").read_text()) for d in tmp_path.iterdir()]
    assert [s["status"] for s in statuses] == ["cancelled"], statuses

    # No harness of the cancelled job is left (the task's kill took its children with it):
    # processes marked with its run id, not those of other tests running on this machine.
    run_ids = [s["run_id"] for s in statuses]

    def left() -> dict[int, str]:
        marked = children.marked_processes("").items()
        return {p: m for p, m in marked if any(f"{r}.preflight" in m for r in run_ids)}

    deadline = time.monotonic() + 10
    while left() and time.monotonic() < deadline:
        await anyio.sleep(0.2)
    assert not left(), left()


async def test_a_worker_lost_twice_is_reported_through_the_tool(
    cluster: None, tmp_path: Path
) -> None:
    prelude = KILLS_WORKER.format(flag=str(tmp_path / "killed"), always=True)
    async with Client(build_server(tmp_path / "runs", executor="ray")) as client:
        result = await client.call_tool("profile_kernel", _args(prelude))
        assert result.is_error
        assert "died 2 time(s)" in _text(result) and "retried 1 time" in _text(result)
        assert not (await client.call_tool("list_skills", {})).is_error  # still serving


async def test_timing_calls_run_on_the_pools_warm_hosts(cluster: None, tmp_path: Path) -> None:
    """method="timing" is a job for a GPU host like an ncu job: its run folder comes back
    into the store with where it ran, the stale variant is caught there, and the next call
    goes to the same warm host."""
    from tests.test_server import TIMED

    async with Client(build_server(tmp_path, executor="ray")) as client:
        results = [
            await client.call_tool(
                "compare_variants",
                {
                    "source": TIMED,
                    "configs": {"n": [20000]},
                    "language": "torch",
                    "method": "timing",
                    "variants": [{"name": "run"}, {"name": "memo", "entry": "memo"}],
                },
            )
            for _ in range(2)
        ]
    for result in results:
        assert not result.is_error, _text(result)
        data = result.structured_content or {}
        assert data["overall"]["memo"]["verdict"] == "incorrect", data["overall"]
    where = [json.loads((tmp_path / _run_id(r) / "where.json").read_text()) for r in results]
    assert where[0]["gpu"] in {"0", "1"} and where[0]["pid"] == where[1]["pid"], where


async def test_diagnose_from_source_runs_its_passes_on_the_pools_hosts(
    cluster: None, tmp_path: Path
) -> None:
    """diagnose_kernel from source measures through the server's executor: its ncu run is a
    job of the Ray pool, and its run folder lands in the store with the GPU host that ran it
    (never its ncu passes here, around the executor). The recorded report holds
    one kernel, so no timing call follows (a call of one kernel has no step to time; that
    the timing call goes through the executor too: tests/test_service.py)."""
    # The recorded report's range is the probe's entry, run_sfu; here it runs the same code.
    args = _args(f"{WRITES_REPORT}\nrun_sfu = lambda x: x * 2")
    args |= {"entry": "run_sfu", "options": {"timeout_s": 2 * WAIT_S}}  # diagnose sets warmup
    del args["runs"]
    async with Client(build_server(tmp_path, executor="ray")) as client:
        result = await client.call_tool("diagnose_kernel", args)
    assert not result.is_error, _text(result)
    passes = (result.structured_content or {})["passes"]
    assert len(passes) == 1 and passes[0].startswith("one pass (run "), passes
    for line in passes:
        run_id = line.split("(run ", 1)[1].split(")", 1)[0]
        where = json.loads((tmp_path / run_id / "where.json").read_text())
        assert where["gpu"] in {"0", "1"}, (line, where)
