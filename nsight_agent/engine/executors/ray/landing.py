"""Where a Ray job's run folder lands: the server's side of its trip back from the node.

    result = land(out, job, root)                 # the host's answer -> RunResult / PreflightResult
    err = salvage_run(ray, where, ended, root, cancelled)   # a killed host's folder, if any

The folder is unpacked into the server's runs root (``ray_node.unpack``: only run folders,
never over an existing run) with a ``where.json`` saying which node, GPU and host ran it; a
job that failed on the node raises its own error class here, its paths rewritten to the
server's runs root.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nsight_agent.engine.executors.base import Job, JobResult
from nsight_agent.engine.executors.ray import node as ray_node
from nsight_agent.engine.executors.ray import scratch as ray_scratch
from nsight_agent.engine.executors.ray.cluster import RemoteJobError
from nsight_agent.engine.store import retention
from nsight_agent.engine.store.facts import RanOn
from nsight_agent.engine.store.run_status import tag_run
from nsight_agent.engine.store.runs import PreflightResult, check_run_id, load_run
from nsight_agent.errors import NsightAgentError, RunCancelledError

WHERE_KEYS = ("node", "gpu", "pid", "started", "ended")


def land(out: dict[str, Any], job: Job, root: Path) -> JobResult:
    """The host's answer into the runs root (trimmed by the retention policy, as where a run
    folder is made): the job's result, or its error raised."""
    ray_node.unpack(out["tar"], root)
    retention.prune(root, *retention.policy())
    write_where(out, root)
    if not out["ok"]:
        payload = out["error"]
        err = ray_node.rebuild_error(payload, out["scratch"], root)
        if err is None:
            err = RemoteJobError(f"{payload['type']} on {out['node']}: {payload['text']}")
        raise err
    if job.mode == "preflight":
        return PreflightResult.model_validate_json(out["preflight"])
    run = load_run(out["run_id"], runs_root=root)
    run.facts.executor = RanOn(**{k: out[k] for k in WHERE_KEYS})
    return run


# How long a cancel waits for a killed host's run folder: 30 s is too short on a two-core
# machine running eight test processes.
SALVAGE_S = 60.0


def salvage_run(
    ray: Any, where: dict[str, Any], ended: float | None, root: Path, err: RunCancelledError
) -> BaseException:
    """Bring the run folder of a job whose host was killed back from its node (best effort,
    30 s): the error then names the run, which the store keeps as ``cancelled``."""
    if not where.get("scratch") or not where.get("node_id"):
        return err  # cancelled before it started: no run folder anywhere
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    try:
        strategy = NodeAffinitySchedulingStrategy(where["node_id"], soft=False)
        task = ray.remote(ray_scratch.salvage).options(num_cpus=0, scheduling_strategy=strategy)
        data = ray.get(task.remote(where["scratch"], int(where["pid"])), timeout=SALVAGE_S)
        run_ids = ray_node.unpack(data, root) if data else []
    except Exception as exc:  # the node may be gone too: the cancel itself stands
        left = (
            f" Its run folder was not brought back from node {where['node_id']} within "
            f"{SALVAGE_S:.0f} s ({type(exc).__name__}); what it wrote stays under "
            f"{where['scratch']} there."
        )
        return (
            RunCancelledError(err.message + left, err.hint)
            if type(err) is RunCancelledError
            else err
        )
    for run_id in run_ids:
        write_where({**where, "run_id": run_id, "ended": ended}, root)
    return tag_run(err, run_ids[0]) if run_ids else err


def write_where(out: dict[str, Any], root: Path) -> None:
    """``where.json`` in the landed run folder, passed or failed: the run store keeps which
    node, GPU (the host's ``CUDA_VISIBLE_DEVICES``) and host process ran the job, which the
    run folder alone does not say once it has left the node (benchmarks and post-mortems)."""
    run_id = out.get("run_id")
    if not isinstance(run_id, str):
        return
    try:
        check_run_id(run_id)  # the id comes from the node: no path outside the runs root
    except NsightAgentError:
        return
    folder = root / run_id
    if folder.is_dir():
        where = {k: out.get(k) for k in WHERE_KEYS}
        (folder / "where.json").write_text(json.dumps(where, indent=1))
