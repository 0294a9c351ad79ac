"""Connecting to a Ray cluster, or starting a local one, for the Ray executor; its errors.

Ray is imported on first use only (``import_ray``): nothing here needs it installed until the
Ray executor is asked for. An address is probed with a TCP connect first (Ray itself retries
for minutes). A local cluster is started from a thread of its own (``init_in_owner_thread``).
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from nsight_agent.engine.collection import ncu
from nsight_agent.engine.pinning import local_slots
from nsight_agent.errors import NcuNotFoundError, NsightAgentError

RESOURCE = "nsight_agent_ncu"
INSTALL = 'pip install "nsight-agent[ray]"'


class RayExecutorError(NsightAgentError):
    """The Ray pool could not run a job."""


class RayNotInstalledError(RayExecutorError):
    """``--executor ray`` was asked for but Ray is not installed."""


class RayClusterUnreachableError(RayExecutorError):
    """The Ray cluster at the given address did not answer (or refused our token)."""


class NoFreeGpuError(RayExecutorError):
    """No node offers a GPU with the ncu resource, or none was free within the timeout."""


class NodeLostError(RayExecutorError):
    """The node (or its worker) died mid-job, on the retry too."""


class RemoteJobError(RayExecutorError):
    """The job failed on the node with an error that could not be rebuilt here."""


def import_ray() -> Any:
    """Ray, imported on first use; a clear error with the install command without it."""
    try:
        import ray
    except ImportError as err:
        raise RayNotInstalledError(
            "The Ray executor needs Ray, which is not installed.",
            f"Install it with: {INSTALL} (on the server and on every GPU node), or use the "
            "local executor.",
        ) from err
    return ray


def probe_address(address: str, timeout: float) -> None:
    """A TCP connect to ``host:port`` (or ``ray://host:port``): fail in seconds, not minutes."""
    text = address.split("://", 1)[-1]
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and other forms: Ray decides
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        raise RayClusterUnreachableError(
            f"The Ray cluster at {address} is unreachable: {err}.",
            "Check the address (the head node's GCS port, 6379 by default, or ray://HOST:10001 "
            "for Ray Client), that the cluster runs (`ray status` on the head) and that this "
            "machine may reach it (firewall, VPN, SSH tunnel).",
        ) from err


def init_in_owner_thread(ray: Any, kwargs: dict[str, Any], stop: threading.Event) -> None:
    """``ray.init`` in a thread that lives until ``stop`` is set (the executor's ``close``).

    The processes of a local cluster (GCS, raylet) are started with PR_SET_PDEATHSIG, which
    fires when the *thread* that started them ends: started from one of the server's
    short-lived worker threads, the cluster died with that thread (seen on the 2-GPU H200:
    "Failed to connect to GCS", then the server process exited)."""
    started = threading.Event()
    failure: list[BaseException] = []

    def own() -> None:
        try:
            ray.init(**kwargs)
        except BaseException as err:  # handed to the caller below
            failure.append(err)
            started.set()
            return
        started.set()
        stop.wait()

    stop.clear()
    threading.Thread(target=own, name="nsight-agent-ray-owner", daemon=True).start()
    started.wait()
    if failure:
        raise failure[0]


def local_resources(resource: str) -> dict[str, float]:
    """The ncu resource of a local cluster: one per GPU here, none without ncu or a GPU."""
    try:
        ncu.find_ncu()
    except NcuNotFoundError:
        return {}
    gpus = [s for s in local_slots() if s != "cpu"]
    return {resource: float(len(gpus))} if gpus else {}
