"""The Ray executor's GPU hosts, server side: one ``GpuHost`` actor per GPU of the pool that
offers the ncu resource, handed to one job at a time in arrival order.

    hosts = HostPool(ray, make_actor, resource, idle_release_s=600.0)
    hosts.prestart()                          # one host per usable GPU, warming up now
    host = hosts.acquire(cancel, 600.0)       # RunCancelledError / NoFreeGpuError / RemoteJobError
    ref = host.actor.run.remote(job, key, board)
    hosts.release(host)                       # release(host, dead=True) when it died: dropped

Hosts are created up to the number of usable GPUs (alive nodes with a GPU and the ncu
resource), and only while jobs wait for one; a dead host is dropped and a new one takes its
place when a job needs it. ``idle_release_s``: a host idle that long gives its GPU back to the
cluster (None: kept until ``close``), so a server on a shared cluster does not hold GPUs it
does not use; the next job starts a new host.
"""

from __future__ import annotations

import collections
import contextlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from nsight_agent.engine.executors.ray import node as ray_node
from nsight_agent.engine.executors.ray.cluster import NoFreeGpuError, RemoteJobError
from nsight_agent.errors import RunCancelledError

HostState = Literal["starting", "idle", "busy", "dead"]

START_FAILURES = 2  # hosts failing to start in a row, none up: jobs get the error at once
NODES_EVERY_S = 2.0  # how often the cluster's nodes are counted while jobs wait


@dataclass(eq=False)
class Host:
    """One GPU host actor and what the server knows of it."""

    actor: Any
    ready: Any  # the actor's first describe() call: answered once the actor is up
    state: HostState = "starting"
    where: dict[str, Any] = field(default_factory=dict)
    jobs_done: int = 0
    last_used: float = field(default_factory=time.monotonic)

    def info(self) -> dict[str, Any]:
        return {
            "node": self.where.get("node"),
            "gpu": self.where.get("gpu"),
            "state": self.state,
            "jobs_done": self.jobs_done,
        }


def usable_gpus(nodes: list[dict[str, Any]], resource: str) -> int:
    """GPUs that may get a host: on alive nodes with a GPU, as many as the ncu resource allows."""
    total = 0
    for node in nodes:
        if ray_node.why_not(node, resource) is None:
            res = node.get("Resources") or {}
            total += int(min(float(res.get("GPU", 0)), float(res.get(resource, 0))))
    return total


def start_failure(err: BaseException) -> str:
    """Why a host failed to start, in one line: Ray's text ends with the constructor's own
    exception after a traceback, in terminal colours."""
    lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", str(err)).splitlines()]
    last = next((ln for ln in reversed(lines) if ln and not set(ln) <= set("^~ ")), "")
    return f"{type(err).__name__}: {last[:300]}"


class HostPool:
    """The GPU hosts of one executor. ``make_actor`` starts one host actor (with its GPU and
    resource options); ``idle_release_s`` as in the module docstring."""

    def __init__(
        self,
        ray: Any,
        make_actor: Callable[[], Any],
        resource: str,
        idle_release_s: float | None = None,
    ) -> None:
        self._ray = ray
        self._make = make_actor
        self._resource = resource
        self._idle_release_s = idle_release_s
        self._hosts: list[Host] = []
        self._line: collections.deque[object] = collections.deque()  # jobs waiting, in order
        self._cond = threading.Condition()
        self._usable = 0
        self._counted_at = -NODES_EVERY_S
        self._failures = 0
        self._start_error = ""
        self._closed = threading.Event()
        if idle_release_s is not None:
            threading.Thread(
                target=self._release_idle, name="nsight-agent-ray-idle", daemon=True
            ).start()

    # --- jobs ---------------------------------------------------------------------------------

    def prestart(self) -> None:
        """A host for every usable GPU now, so the first jobs find warm workers."""
        self._count_nodes(force=True)
        with self._cond:
            self._add_hosts(self._usable - self._live())

    def acquire(self, cancel: threading.Event, timeout_s: float) -> Host:
        """The next idle host for this job, in arrival order, waiting at most ``timeout_s``;
        it is busy until ``release``."""
        deadline = time.monotonic() + timeout_s
        ticket = object()
        with self._cond:
            self._line.append(ticket)
        try:
            while True:
                self._note_started()
                self._count_nodes()
                with self._cond:
                    host = self._take(ticket)
                    if host is not None:
                        return host
                    self._cond.wait(0.2)
                if self._closed.is_set():
                    raise RunCancelledError("The executor was closed.")
                if cancel.is_set():
                    raise RunCancelledError("The job was cancelled while it waited for a GPU.")
                if time.monotonic() > deadline:
                    raise NoFreeGpuError(
                        f"No GPU of the Ray cluster became free within {timeout_s:g} s.",
                        "Every GPU with the ncu resource is busy or held by other work: wait, "
                        "add nodes, or raise the queue timeout; device_info shows the hosts, "
                        "the jobs running and queued.",
                    )
        finally:
            with self._cond:
                self._line.remove(ticket)
                self._cond.notify_all()

    def release(self, host: Host, *, dead: bool = False) -> None:
        """Hand the host back after its job; a host that died (or was killed) is dropped."""
        with self._cond:
            host.jobs_done += 1
            host.last_used = time.monotonic()
            host.state = "dead" if dead else "idle"
            self._cond.notify_all()
        if dead:
            self.kill(host)

    def kill(self, host: Host) -> None:
        host.state = "dead"
        with contextlib.suppress(Exception):  # it may be dead already
            self._ray.kill(host.actor, no_restart=True)

    def close(self) -> None:
        self._closed.set()
        with self._cond:
            hosts, self._hosts = list(self._hosts), []
            self._cond.notify_all()
        self._retire(hosts)

    def _retire(self, hosts: list[Host]) -> None:
        """Ask each host to end its workers (5 s at most, all at once), then kill its actor."""
        closing = []
        for host in hosts:
            with contextlib.suppress(Exception):
                closing.append(host.actor.close.remote())
        with contextlib.suppress(Exception):
            self._ray.wait(closing, num_returns=len(closing), timeout=5)
        for host in hosts:
            self.kill(host)

    # --- what device_info shows ---------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """Each host (node, GPU, state, jobs, whether its worker is warm, asked of the host
        within 2 s), the jobs running and waiting."""
        self._note_started()
        with self._cond:
            hosts = [h for h in self._hosts if h.state != "dead"]
            rows = [h.info() for h in hosts]
            queued = len(self._line)
        up = [(row, h.actor.describe.remote()) for row, h in zip(rows, hosts) if h.where]
        with contextlib.suppress(Exception):  # a host that does not answer shows no "warm"
            ready, _ = self._ray.wait([ref for _, ref in up], num_returns=len(up), timeout=2)
            for row, ref in up:
                if ref in ready:
                    row["warm"] = bool(self._ray.get(ref).get("warm"))
        return {
            "hosts": rows,
            "running": sum(1 for r in rows if r["state"] == "busy"),
            "queued": queued,
            "idle_release_s": self._idle_release_s,
        }

    # --- inside -------------------------------------------------------------------------------

    def _take(self, ticket: object) -> Host | None:
        """Under the lock: the warmest idle host if this job is first in line; otherwise make
        sure enough hosts exist or start for the jobs waiting."""
        idle = [h for h in self._hosts if h.state == "idle"]
        if self._line and self._line[0] is ticket and idle:
            # The warmest: one that ran jobs already (its compile caches are full), latest first.
            host = max(idle, key=lambda h: (h.jobs_done > 0, h.last_used))
            host.state = "busy"
            return host
        if self._failures >= START_FAILURES and self._live() == 0:
            raise RemoteJobError(
                f"The GPU host could not start on the Ray cluster: {self._start_error}",
                "Every GPU node needs nsight-agent and its libraries installed (the same "
                "versions as the server), or a runtime_env that ships them; the host's log is "
                "in the node's /tmp/ray/session_latest/logs.",
            )
        starting = sum(1 for h in self._hosts if h.state == "starting")
        wanted = min(len(self._line) - len(idle) - starting, self._usable - self._live())
        self._add_hosts(wanted)
        return None

    def _live(self) -> int:
        return sum(1 for h in self._hosts if h.state != "dead")

    def _add_hosts(self, count: int) -> None:
        self._hosts = [h for h in self._hosts if h.state != "dead"]
        for _ in range(max(0, count)):
            actor = self._make()
            self._hosts.append(Host(actor, actor.describe.remote()))

    def _count_nodes(self, force: bool = False) -> None:
        if force or time.monotonic() - self._counted_at >= NODES_EVERY_S:
            self._counted_at = time.monotonic()
            with contextlib.suppress(Exception):  # a GCS hiccup: keep the last count
                self._usable = usable_gpus(self._ray.nodes(), self._resource)

    def _note_started(self) -> None:
        """Hosts whose actor came up become idle; one that failed to start is dropped.

        Several threads call this (each waiting job, device_info): a host is changed only
        while it is still starting, so a thread that read it as starting before another one
        made it idle and a job took it never turns the busy host back to idle (which once
        showed 0 jobs running while two ran, and could hand a second job to a busy GPU)."""
        with self._cond:
            starting = [h for h in self._hosts if h.state == "starting"]
        if not starting:
            return
        ray = self._ray
        done, _ = ray.wait([h.ready for h in starting], num_returns=len(starting), timeout=0)
        for host in (h for h in starting if h.ready in done):
            try:
                where = dict(ray.get(host.ready, timeout=5))
            except Exception as err:  # the actor's constructor failed, or its node went away
                with self._cond:
                    if host.state != "starting":
                        continue
                    host.state = "dead"
                    self._failures += 1
                    self._start_error = start_failure(err)
                self.kill(host)
                continue
            with self._cond:
                if host.state != "starting":
                    continue
                host.where, host.state, self._failures = where, "idle", 0
                host.last_used = time.monotonic()
                self._cond.notify_all()

    def _release_idle(self) -> None:
        assert self._idle_release_s is not None
        while not self._closed.wait(min(5.0, self._idle_release_s)):
            now = time.monotonic()
            with self._cond:
                old = [
                    h
                    for h in self._hosts
                    if h.state == "idle" and now - h.last_used > self._idle_release_s
                ]
                for host in old:
                    host.state = "dead"
            self._retire(old)
