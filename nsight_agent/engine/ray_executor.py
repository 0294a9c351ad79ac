"""The Ray executor: profiling jobs as Ray tasks on a GPU pool, local or remote.

    executor = RayExecutor()                           # a local cluster over this machine's GPUs
    executor = RayExecutor("head-node:6379")           # an existing cluster (token auth applies)
    run = executor.profile(request, runs_root=root, on_progress=say, cancel=event)
    executor.pool_info()                               # nodes, GPUs, resources, jobs

Each job is one Ray task with one GPU (``num_gpus=1``) and one unit of the custom resource
``nsight_agent_ncu``, which a node advertises when it has ncu and counter permission::

    ray start --address HEAD:6379 --resources '{"nsight_agent_ncu": 8}'   # 8 GPUs, all usable

Ray gives the task its own ``CUDA_VISIBLE_DEVICES``; the task profiles into a scratch runs
root on the node and returns the run folder (``ray_node``), which lands in the server's runs
root, so ``load_run`` and every tool read it as a local run. A comparison is one job, so it
stays on one GPU.

Failures are specific errors: Ray missing (``RayNotInstalledError``), the cluster unreachable
(``RayClusterUnreachableError``, checked with a TCP connect first: Ray itself retries for
minutes), no node offering the GPU and resource, or none free within ``queue_timeout_s``
(``NoFreeGpuError``), the node or worker lost mid-job, retried once elsewhere and lost again
(``NodeLostError``). Cancelling (the ``cancel`` event) is ``ray.cancel(ref, force=True)``: the
worker is killed, and ncu with it. Ray's token authentication (on by default since Ray 2.59)
is never turned off here: the token comes from ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or
``~/.ray/auth_token`` (docs/DISTRIBUTED.md).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from nsight_agent.engine import ray_node
from nsight_agent.engine.executor import Executor, Job, JobHandle, JobResult
from nsight_agent.engine.pipeline import CancelledError, Progress
from nsight_agent.engine.ray_cluster import (
    RESOURCE,
    NodeLostError,
    NoFreeGpuError,
    RayClusterUnreachableError,
    RayExecutorError,
    RayNotInstalledError,
    RemoteJobError,
    import_ray,
    init_in_owner_thread,
    local_resources,
    probe_address,
)
from nsight_agent.engine.run_status import tag_run
from nsight_agent.engine.runs import PreflightResult, check_run_id, default_runs_root, load_run
from nsight_agent.errors import NsightAgentError

__all__ = [
    "RESOURCE",
    "NoFreeGpuError",
    "NodeLostError",
    "RayClusterUnreachableError",
    "RayExecutor",
    "RayExecutorError",
    "RayNotInstalledError",
    "RemoteJobError",
    "import_ray",
]


class RayExecutor(Executor):
    """Jobs as Ray tasks, one GPU each; artifacts come back into the server's runs root.

    ``address``: an existing cluster (None starts a local one over this machine's GPUs,
    advertising the ncu resource when ncu is installed). ``queue_timeout_s``: how long a job
    may wait for a free GPU. ``max_retries``: reruns after a lost node or worker (1: retried
    once). ``runtime_env`` / ``init_kwargs``: passed to ``ray.init``."""

    checks_ncu_here = False  # ncu lives on the nodes

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        resource: str = RESOURCE,
        queue_timeout_s: float = 600.0,
        max_retries: int = 1,
        connect_timeout_s: float = 10.0,
        runtime_env: dict[str, Any] | None = None,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.address = address
        self.resource = resource
        self.queue_timeout_s = queue_timeout_s
        self.max_retries = max_retries
        self.connect_timeout_s = connect_timeout_s
        self.runtime_env = runtime_env
        self.init_kwargs = dict(init_kwargs or {})
        self._ray: Any = None
        self._task: Any = None
        self._board: Any = None
        self._owns_cluster = False
        self._owner_stop = threading.Event()
        self._lock = threading.Lock()
        self._jobs: dict[str, JobHandle] = {}
        self._facts: dict[str, dict[str, Any]] = {}  # node id -> what node_facts read there

    # --- connecting ---------------------------------------------------------------------------

    def connect(self) -> Any:
        """Connect (or start a local cluster) once; reuse a Ray session already initialised."""
        with self._lock:
            if self._ray is not None:
                return self._ray
            ray = import_ray()
            if not ray.is_initialized():
                self._init(ray)
            self._task = ray.remote(ray_node.node_job).options(
                num_cpus=1,
                num_gpus=1,
                resources={self.resource: 1},
                max_retries=self.max_retries,
                retry_exceptions=False,
            )
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = NodeAffinitySchedulingStrategy(
                ray.get_runtime_context().get_node_id(), soft=True
            )
            board_class = ray.remote(num_cpus=0, scheduling_strategy=here)(ray_node.Board)
            self._board = board_class.remote()
            self._ray = ray
            return ray

    def _init(self, ray: Any) -> None:
        kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
        kwargs.update(self.init_kwargs)  # log_to_driver stays off for stdio: stdout is the wire
        if self.runtime_env is not None:
            kwargs["runtime_env"] = self.runtime_env
        if self.address:
            probe_address(self.address, self.connect_timeout_s)
            kwargs["address"] = self.address
        else:
            kwargs.setdefault("resources", local_resources(self.resource))
        try:
            init_in_owner_thread(ray, kwargs, self._owner_stop)
        except ray.exceptions.AuthenticationError as err:
            raise RayClusterUnreachableError(
                f"The Ray cluster at {self.address} refused our token: {err}",
                "Give this machine the cluster's token: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or "
                "~/.ray/auth_token (`ray get-auth-token` on the head prints it).",
            ) from err
        except (ConnectionError, TimeoutError, RuntimeError) as err:
            raise RayClusterUnreachableError(
                f"Could not connect to the Ray cluster at {self.address or 'a new local one'}: "
                f"{err}",
                "Check that the cluster runs (`ray status`), that Ray's versions match, and the "
                "token settings (docs/DISTRIBUTED.md).",
            ) from err
        self._owns_cluster = not self.address

    def close(self) -> None:
        """Cancel this executor's jobs, drop the board; shut down a cluster we started."""
        if self._ray is None:
            return
        with self._lock:
            handles = list(self._jobs.values())
        for handle in handles:
            handle.cancel()
        if self._owns_cluster:
            self._ray.shutdown()
        self._owner_stop.set()  # the owner thread ends only now, after the cluster
        self._ray = self._task = self._board = None

    # --- jobs ---------------------------------------------------------------------------------

    def submit(
        self,
        job: Job,
        *,
        cancel: threading.Event | None = None,
        on_progress: Progress | None = None,
    ) -> JobHandle:
        ray = self.connect()
        self._check_feasible(ray)
        root = Path(job.runs_root or default_runs_root())
        handle = JobHandle(job, cancel)
        key = uuid.uuid4().hex
        ref = self._task.remote(dataclasses.replace(job, runs_root=None), key, self._board)
        with self._lock:
            self._jobs[key] = handle
        threading.Thread(
            target=self._drive,
            args=(handle, key, ref, on_progress, root),
            name=f"nsight-agent-ray-{key[:8]}",
            daemon=True,
        ).start()
        return handle

    def _check_feasible(self, ray: Any) -> None:
        if any(ray_node.why_not(n, self.resource) is None for n in ray.nodes()):
            return
        raise NoFreeGpuError(
            f"No node of the Ray cluster offers a GPU with the {self.resource!r} resource.",
            f"Start GPU nodes that have ncu and counter permission with `ray start --address "
            f"HEAD:6379 --resources '{{\"{self.resource}\": N}}'` (N: their GPUs); "
            "device_info lists the nodes and why each is not given jobs.",
        )

    def _drive(
        self,
        handle: JobHandle,
        key: str,
        ref: Any,
        on_progress: Progress | None,
        root: Path,
    ) -> None:
        try:
            out = self._wait(handle, key, ref, on_progress)
            handle.ended = time.time()
            handle.future.set_result(self._land(out, handle.job, root))
        except CancelledError as err:
            handle.ended = time.time()
            handle.future.set_exception(self._salvage(handle, root, err))
        except BaseException as err:  # handed to the waiting caller
            handle.future.set_exception(err)
        finally:
            with self._lock:
                self._jobs.pop(key, None)
            if self._board is not None:
                self._board.forget.remote(key)

    def _wait(
        self, handle: JobHandle, key: str, ref: Any, on_progress: Progress | None
    ) -> dict[str, Any]:
        ray = self._ray
        deadline = time.monotonic() + self.queue_timeout_s
        shown: list[Any] = []
        state: dict[str, Any] | None = None
        while True:
            ready, _ = ray.wait([ref], timeout=0.25)
            state = self._state(key) or state
            if state is not None:
                _note_start(handle, state)
                if on_progress is not None and state.get("progress") not in ([], shown):
                    shown = list(state["progress"])
                    on_progress(int(shown[0]), int(shown[1]), str(shown[2]))
            if ready:
                break
            if handle.cancel_event.is_set():
                ray.cancel(ref, force=True)
                raise CancelledError("The job was cancelled; its Ray task (and ncu) was killed.")
            if state is None and time.monotonic() > deadline:
                ray.cancel(ref, force=True)
                raise NoFreeGpuError(
                    f"No GPU of the Ray cluster became free within {self.queue_timeout_s:g} s.",
                    "Every GPU with the ncu resource is busy: wait, add nodes, or raise the "
                    "queue timeout; device_info shows the jobs running and queued.",
                )
        return self._result_of(ray, ref, key, state)

    def _result_of(
        self, ray: Any, ref: Any, key: str, state: dict[str, Any] | None
    ) -> dict[str, Any]:
        lost = (
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.NodeDiedError,
            ray.exceptions.LocalRayletDiedError,
            ray.exceptions.ObjectLostError,
        )
        try:
            out: dict[str, Any] = ray.get(ref)
            return out
        except ray.exceptions.TaskCancelledError as err:
            raise CancelledError("The job's Ray task was cancelled.") from err
        except lost as err:
            attempts = int(((self._state(key) or state) or {}).get("attempts", 0))
            raise NodeLostError(
                f"The node or worker running the job died {attempts} time(s); it was retried "
                f"{self.max_retries} time(s) and lost again: {type(err).__name__}.",
                "The run's files stayed on the lost node. A crash in native code that kills "
                "its parent, the OOM killer or a node going down cause this; device_info "
                "shows the nodes still alive.",
            ) from err
        except ray.exceptions.RayError as err:
            raise RemoteJobError(f"The job failed in Ray: {err}") from err

    def _salvage(self, handle: JobHandle, root: Path, err: CancelledError) -> BaseException:
        """Bring a force-cancelled job's run folder back from its node (best effort, 30 s):
        the error then names the run, which the store keeps as ``cancelled``."""
        where = handle.where
        if not where.get("scratch") or not where.get("node_id"):
            return err  # cancelled before it started: no run folder anywhere
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        try:
            strategy = NodeAffinitySchedulingStrategy(where["node_id"], soft=False)
            task = self._ray.remote(ray_node.salvage).options(
                num_cpus=0, scheduling_strategy=strategy
            )
            data = self._ray.get(task.remote(where["scratch"], int(where["pid"])), timeout=30)
            run_ids = ray_node.unpack(data, root) if data else []
        except Exception:  # the node may be gone too: the cancel itself stands
            return err
        for run_id in run_ids:
            _write_where({**where, "run_id": run_id, "ended": handle.ended}, root)
        return tag_run(err, run_ids[0]) if run_ids else err

    def _state(self, key: str) -> dict[str, Any] | None:
        try:
            state: dict[str, Any] | None = self._ray.get(self._board.state.remote(key), timeout=5)
        except Exception:  # the board is only a convenience
            return None
        return state

    def _land(self, out: dict[str, Any], job: Job, root: Path) -> JobResult:
        ray_node.unpack(out["tar"], root)
        _write_where(out, root)
        if not out["ok"]:
            payload = out["error"]
            err = ray_node.rebuild_error(payload, out["scratch"], root)
            if err is None:
                err = RemoteJobError(f"{payload['type']} on {out['node']}: {payload['text']}")
            raise err
        if job.mode == "preflight":
            return PreflightResult.model_validate_json(out["preflight"])
        run = load_run(out["run_id"], runs_root=root)
        run.extra["executor"] = {k: out[k] for k in ("node", "gpu", "pid", "started", "ended")}
        return run

    # --- the pool -----------------------------------------------------------------------------

    def _node_facts(self, ray: Any, node_ids: list[str]) -> dict[str, dict[str, Any]]:
        """Each alive node's GPUs, ncu and counter access, read once per node by a task pinned
        there (a node that does not answer within 30 s says so, and is asked again later)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        todo = [n for n in node_ids if n not in self._facts]
        refs = {
            n: ray.remote(ray_node.node_facts)
            .options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False))
            .remote()
            for n in todo
        }
        out: dict[str, dict[str, Any]] = {}
        for node_id, ref in refs.items():
            try:
                self._facts[node_id] = dict(ray.get(ref, timeout=30))
            except Exception as err:  # shown, not fatal: the pool still lists the node
                ray.cancel(ref, force=True)
                out[node_id] = {"facts_error": f"{type(err).__name__}: {str(err)[:160]}"}
        out.update({n: self._facts[n] for n in node_ids if n in self._facts})
        return out

    def pool_info(self) -> dict[str, Any]:
        ray = self.connect()
        raw_nodes = ray.nodes()  # one snapshot of the cluster for the whole answer
        facts = self._node_facts(ray, [n["NodeID"] for n in raw_nodes if n.get("Alive")])
        nodes = [
            {**ray_node.node_info(n, self.resource), **facts.get(n.get("NodeID"), {})}
            for n in raw_nodes
        ]
        try:
            states = dict(ray.get(self._board.snapshot.remote(), timeout=5))
        except Exception:
            states = {}
        with self._lock:
            keys = list(self._jobs)
        running = sum(1 for k in keys if k in states and states[k].get("info"))
        free = ray.available_resources()
        return {
            "executor": self.name,
            "address": self.address or "local",
            "resource": self.resource,
            "nodes": nodes,
            "gpus": sum(n["gpus"] for n in nodes if n["alive"]),
            "gpus_free": float(free.get("GPU", 0.0)),
            "running": running,
            "queued": len(keys) - running,
        }


# --- helpers ----------------------------------------------------------------------------------


def _write_where(out: dict[str, Any], root: Path) -> None:
    """``where.json`` in the landed run folder, passed or failed: the run store keeps which
    node and GPU (the Ray task's ``CUDA_VISIBLE_DEVICES``) ran the job, which the run folder
    alone does not say once it has left the node (benchmarks and post-mortems read it)."""
    run_id = out.get("run_id")
    if not isinstance(run_id, str):
        return
    try:
        check_run_id(run_id)  # the id comes from the node: no path outside the runs root
    except NsightAgentError:
        return
    folder = root / run_id
    if folder.is_dir():
        where = {k: out.get(k) for k in ("node", "gpu", "pid", "started", "ended")}
        (folder / "where.json").write_text(json.dumps(where, indent=1))


def _note_start(handle: JobHandle, state: dict[str, Any]) -> None:
    info = state.get("info") or {}
    if info:
        handle.device = f"{info.get('node')}:gpu{info.get('gpu')}"
        handle.started = float(info.get("started", time.time()))
        handle.attempts = int(state.get("attempts", 1))
        handle.where = dict(info)
