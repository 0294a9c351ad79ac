"""The Ray executor: profiling and timing jobs on a Ray GPU pool, local or remote.

    executor = RayExecutor()                           # a local cluster over this machine's GPUs
    executor = RayExecutor("head-node:6379")           # an existing cluster (token auth applies)
    run = executor.profile(request, runs_root=root, on_progress=say, cancel=event)
    run = executor.run(Job(request, root, mode="timing"))  # method="timing" on a pool GPU
    executor.pool_info()                               # nodes, GPUs, hosts, jobs

Each GPU of the pool that may profile gets a host: a Ray actor (``gpu_host.GpuHost``) holding
one GPU (``num_gpus=1``) and one unit of the custom resource ``nsight_agent_ncu``, which a node
advertises when it has ncu and counter permission::

    ray start --address HEAD:6379 --resources '{"nsight_agent_ncu": 8}'   # 8 GPUs, all usable

A host runs one job at a time on its warm worker, as the local executor's GPU slot does
(``hosts.py`` hands hosts to jobs in arrival order; ``jobs.py`` drives each job through
them). The job profiles into a scratch runs root on the node and returns the run folder
(``node.py``), which lands in the server's runs root (``landing.py``), so ``load_run`` and
every tool read it as a local run. A comparison is one job, so it stays on one GPU.

Failures are specific errors: Ray missing (``RayNotInstalledError``), the cluster unreachable
(``RayClusterUnreachableError``, checked with a TCP connect first: Ray itself retries for
minutes), no node offering the GPU and resource, or none free within ``queue_timeout_s``
(``NoFreeGpuError``), a host that cannot start (``RemoteJobError``), the host or its node lost
mid-job, retried once on another host and lost again (``NodeLostError``). Cancelling (the
``cancel`` event) asks the host to stop the job, which kills ncu and keeps the host warm; a
host that does not stop within ``CANCEL_GRACE_S`` is killed, and its node sends the run folder
back. Ray's token authentication (on by default since Ray 2.59) is never turned off here: the
token comes from ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``
(docs/DISTRIBUTED.md).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from nsight_agent.engine.executors.base import Executor, Job, JobHandle
from nsight_agent.engine.executors.ray import node as ray_node
from nsight_agent.engine.executors.ray.cluster import (
    RESOURCE,
    NodeLostError,
    NoFreeGpuError,
    RayClusterUnreachableError,
    RayExecutorError,
    RayNotInstalledError,
    RemoteJobError,
    anew,
    import_ray,
    init_in_owner_thread,
    local_resources,
    probe_address,
    probe_gcs,
    token_refused,
)
from nsight_agent.engine.executors.ray.gpu_host import GpuHost
from nsight_agent.engine.executors.ray.hosts import HostPool, usable_gpus
from nsight_agent.engine.executors.ray.jobs import CANCEL_GRACE_S, JobDriver
from nsight_agent.engine.executors.ray.landing import land
from nsight_agent.engine.pipeline import Progress
from nsight_agent.engine.store.runs import default_runs_root

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

IDLE_RELEASE_S = 600.0  # on a cluster we joined: a host idle that long gives its GPU back
HOST_CALLS = 8  # concurrent calls into one host: its job, cancels, describe, close


class RayExecutor(Executor):
    """Jobs on the GPU hosts of a Ray cluster; artifacts come back into the server's runs root.

    ``address``: an existing cluster (None starts a local one over this machine's GPUs,
    advertising the ncu resource when ncu is installed). ``queue_timeout_s``: how long a job
    may wait for a free GPU. ``max_retries``: reruns after a lost host or node (1: retried
    once). ``idle_release_s``: a host idle that long gives its GPU back (default: never on a
    local cluster we started, 600 s on a cluster we joined; ``math.inf``: never). ``runtime_env`` /
    ``init_kwargs``: passed to ``ray.init``."""

    checks_ncu_here = False  # ncu lives on the nodes
    runs_timing = True  # on the hosts' warm workers

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        resource: str = RESOURCE,
        queue_timeout_s: float = 600.0,
        max_retries: int = 1,
        connect_timeout_s: float = 5.0,
        idle_release_s: float | None = None,
        runtime_env: dict[str, Any] | None = None,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.address = address
        self.resource = resource
        self.queue_timeout_s = queue_timeout_s
        self.max_retries = max_retries
        self.connect_timeout_s = connect_timeout_s
        if idle_release_s is None:
            idle_release_s = IDLE_RELEASE_S if address else None
        # math.inf keeps the hosts, as None does (and stays out of JSON answers)
        self.idle_release_s = None if idle_release_s == math.inf else idle_release_s
        self.runtime_env = runtime_env
        self.init_kwargs = dict(init_kwargs or {})
        self._ray: Any = None
        self._hosts: HostPool | None = None
        self._driver: JobDriver | None = None
        self._board: Any = None
        self._owns_cluster = False
        self._owner_stop = threading.Event()
        self._lock = threading.Lock()
        self._failed: tuple[float, RayExecutorError] | None = None  # the last attempt's end
        self._jobs: dict[str, JobHandle] = {}
        self._facts: dict[str, dict[str, Any]] = {}  # node id -> what node_facts read there

    # --- connecting ---------------------------------------------------------------------------

    def connect(self) -> Any:
        """Connect (or start a local cluster) once, reusing a Ray session already initialised;
        on a local cluster we started, start a host on every usable GPU at once.

        One bounded attempt at a time, shared: the calls that waited for an attempt that
        failed get its error at once instead of trying again one after another (a later
        call tries again)."""
        asked = time.monotonic()
        with self._lock:
            if self._ray is not None:
                return self._ray
            if self._failed is not None and self._failed[0] >= asked:
                raise anew(self._failed[1])
            try:
                return self._connect()
            except RayExecutorError as err:
                self._failed = (time.monotonic(), err)
                raise

    def _connect(self) -> Any:
        """Under the lock: connect, then the board and the hosts."""
        ray = import_ray()
        if not ray.is_initialized():
            self._init(ray)
        host_class = ray.remote(GpuHost).options(
            num_cpus=1,
            num_gpus=1,
            resources={self.resource: 1},
            max_concurrency=HOST_CALLS,
            max_restarts=0,
        )
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        board_class = ray.remote(num_cpus=0, scheduling_strategy=here)(ray_node.Board)
        self._board = board_class.remote()
        self._hosts = HostPool(ray, host_class.remote, self.resource, self.idle_release_s)
        if self._owns_cluster:  # ours: warm every GPU now. A shared one: only on demand.
            self._hosts.prestart()
        self._driver = JobDriver(
            ray, self._hosts, self._board, self.queue_timeout_s, self.max_retries
        )
        self._ray = ray
        return ray

    def _init(self, ray: Any) -> None:
        kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
        kwargs.update(self.init_kwargs)  # log_to_driver stays off for stdio: stdout is the wire
        if self.runtime_env is not None:
            kwargs["runtime_env"] = self.runtime_env
        if self.address:
            probe_address(self.address, self.connect_timeout_s)
            probe_gcs(ray, self.address, self.connect_timeout_s)
            kwargs["address"] = self.address
        else:
            kwargs.setdefault("resources", local_resources(self.resource))
        try:
            init_in_owner_thread(ray, kwargs, self._owner_stop)
        except ray.exceptions.AuthenticationError as err:
            raise token_refused(str(self.address), err) from err
        except (ConnectionError, TimeoutError, RuntimeError) as err:
            raise RayClusterUnreachableError(
                f"Could not connect to the Ray cluster at {self.address or 'a new local one'}: "
                f"{err}",
                "Check that the cluster runs (`ray status`), that Ray's versions match, and the "
                "token settings (docs/DISTRIBUTED.md).",
            ) from err
        self._owns_cluster = not self.address

    def close(self) -> None:
        """Cancel this executor's jobs, end its hosts; shut down a cluster we started."""
        if self._ray is None:
            return
        with self._lock:
            handles = list(self._jobs.values())
        for handle in handles:
            handle.cancel()
        for handle in handles:
            with contextlib.suppress(BaseException):
                handle.result(CANCEL_GRACE_S)
        if self._hosts is not None:
            self._hosts.close()
        if self._owns_cluster:
            self._ray.shutdown()
        self._owner_stop.set()  # the owner thread ends only now, after the cluster
        self._ray = self._hosts = self._board = self._driver = None

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
        with self._lock:
            self._jobs[key] = handle
        threading.Thread(
            target=self._drive,
            args=(handle, key, on_progress, root),
            name=f"nsight-agent-ray-{key[:8]}",
            daemon=True,
        ).start()
        return handle

    def _check_feasible(self, ray: Any) -> None:
        if usable_gpus(ray.nodes(), self.resource):
            return
        raise NoFreeGpuError(
            f"No node of the Ray cluster offers a GPU with the {self.resource!r} resource.",
            f"Start GPU nodes that have ncu and counter permission with `ray start --address "
            f"HEAD:6379 --resources '{{\"{self.resource}\": N}}'` (N: their GPUs); "
            "device_info lists the nodes and why each is not given jobs.",
        )

    def _drive(self, handle: JobHandle, key: str, on_progress: Progress | None, root: Path) -> None:
        try:
            assert self._driver is not None
            out = self._driver.run(handle, key, on_progress, root)
            handle.ended = time.time()
            handle.future.set_result(land(out, handle.job, root))
        except BaseException as err:  # handed to the waiting caller
            handle.ended = handle.ended or time.time()
            handle.future.set_exception(err)
        finally:
            with self._lock:
                self._jobs.pop(key, None)
            if self._board is not None:
                self._board.forget.remote(key)

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
        assert self._hosts is not None
        free = ray.available_resources()
        return {
            "executor": self.name,
            "address": self.address or "local",
            "resource": self.resource,
            "nodes": nodes,
            "gpus": sum(n["gpus"] for n in nodes if n["alive"]),
            "gpus_free": float(free.get("GPU", 0.0)),  # not held by a host or other work
            **self._hosts.info(),
        }
