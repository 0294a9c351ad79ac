"""Connecting to a Ray cluster, or starting a local one, for the Ray executor; its errors.

Ray is imported on first use only (``import_ray``): nothing here needs it installed until the
Ray executor is asked for. An address is probed with a TCP connect first (Ray itself retries
for minutes), then its GCS is asked once with this process's token (``probe_gcs``): a refused
token is named (InvalidAuthToken, and where the token comes from) in milliseconds, where
``ray.init`` retries for about 20 s and says only "Failed to connect". A local cluster is
started from a thread of its own (``init_in_owner_thread``).
"""

from __future__ import annotations

import importlib
import os
import socket
import threading
from pathlib import Path
from typing import Any

from nsight_agent.engine.collection import ncu
from nsight_agent.engine.pinning import local_slots
from nsight_agent.errors import NcuNotFoundError, NsightAgentError

RESOURCE = "nsight_agent_ncu"
INSTALL = 'pip install ".[ray]" in a clone of nsight-agent (no release is published yet)'


class RayExecutorError(NsightAgentError):
    """The Ray pool could not run a job."""


class RayNotInstalledError(RayExecutorError):
    """``--executor ray`` was asked for but Ray is not installed."""


class RayClusterUnreachableError(RayExecutorError):
    """The Ray cluster at the given address did not answer (or refused our token)."""


class RayTokenRefusedError(RayClusterUnreachableError):
    """The Ray cluster refused this process's token (Ray's InvalidAuthToken)."""


class NoFreeGpuError(RayExecutorError):
    """No node offers a GPU with the ncu resource, or none was free within the timeout."""


class NodeLostError(RayExecutorError):
    """The node (or its worker) died mid-job, on the retry too."""


class RemoteJobError(RayExecutorError):
    """The job failed on the node with an error that could not be rebuilt here."""


def anew(err: RayExecutorError) -> RayExecutorError:
    """An error another call's attempt ended with, made anew to be raised for this call."""
    try:
        again = type(err)(err.message, err.hint)
    except TypeError:
        return err
    again.__cause__ = err.__cause__
    return again


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
    host, port = _host_port(address)
    if not host:
        return  # "auto" and other forms: Ray decides
    try:
        socket.create_connection((host.strip("[]"), port), timeout=timeout).close()
    except OSError as err:
        raise RayClusterUnreachableError(
            f"The Ray cluster at {address} is unreachable: {err}.",
            "Check the address (the head node's GCS port, 6379 by default, or ray://HOST:10001 "
            "for Ray Client), that the cluster runs (`ray status` on the head) and that this "
            "machine may reach it (firewall, VPN, SSH tunnel).",
        ) from err


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    return (host, int(port)) if host and port.isdigit() else ("", 0)


def probe_gcs(ray: Any, address: str, timeout: float) -> None:
    """Ask the GCS at ``address`` once, with this process's token, waiting at most ``timeout``
    (Ray's client blocks for about 40 s on a port that is not a GCS): a refused token raises
    ``RayTokenRefusedError``; no answer, or any other error, ``RayClusterUnreachableError``
    with Ray's words. Ray Client addresses (ray://) are not probed."""
    host, port = _host_port(address)
    if not host or address.startswith("ray://"):
        return
    gcs_client = getattr(_raylet(), "GcsClient", None)
    if gcs_client is None:  # a Ray without it: ray.init decides
        return
    answer: list[BaseException | None] = []
    answered = threading.Event()

    def ask() -> None:
        try:
            gcs_client(address=f"{host}:{port}")
            answer.append(None)
        except BaseException as err:  # handed to the caller below
            answer.append(err)
        answered.set()

    threading.Thread(target=ask, name="nsight-agent-ray-probe", daemon=True).start()
    if not answered.wait(timeout):
        raise RayClusterUnreachableError(
            f"The address {address} accepts connections, but no Ray GCS answered there within "
            f"{timeout:g} s.",
            "Check that it is the head node's GCS port (6379 by default; `ray status` on the "
            "head), or use ray://HOST:10001 for Ray Client.",
        )
    err = answer[0]
    if err is None or isinstance(err, TypeError):  # answered, or a Ray whose client differs
        return
    refused = getattr(ray.exceptions, "AuthenticationError", ())  # Ray >= 2.52
    if isinstance(err, refused) or "InvalidAuthToken" in str(err):
        raise token_refused(address, err) from err
    raise RayClusterUnreachableError(
        f"No Ray GCS answered at {address}: {type(err).__name__}: {str(err)[:300]}.",
        "Check that it is the head node's GCS port (6379 by default; `ray status` on the "
        "head), that a proxy does not stand between (Ray speaks gRPC), or use "
        "ray://HOST:10001 for Ray Client.",
    ) from err


def token_source() -> str:
    """Where Ray takes the token this process sends, in Ray's order (the token never shown)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "the RAY_AUTH_TOKEN environment variable"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    where = f"the file {path} (RAY_AUTH_TOKEN_PATH)"
    if not path:
        path = str(Path.home() / ".ray" / "auth_token")
        where = (
            f"the file {path} (the default: neither RAY_AUTH_TOKEN nor RAY_AUTH_TOKEN_PATH is set)"
        )
    return where if Path(path).is_file() else f"{where}, which does not exist"


def _raylet() -> Any:
    try:
        return importlib.import_module("ray._raylet")  # Ray's own client, not in its stubs
    except ImportError:
        return None


def _token_mode() -> str:
    raylet = _raylet()
    try:
        token = raylet.get_authentication_mode() == raylet.AuthenticationMode.TOKEN
        return "token" if token else "disabled"
    except AttributeError:
        return os.environ.get("RAY_AUTH_MODE", "") or "unset"


def token_refused(address: str, err: BaseException) -> RayTokenRefusedError:
    """The error of a refused token: Ray's words (InvalidAuthToken), where our token comes
    from, and whether Ray sends one at all from here."""
    said = str(getattr(err, "message", "") or err).strip().removeprefix("RPC error: ")
    mode = _token_mode()
    sends = f"This server sends the token from {token_source()}."
    if mode != "token":
        sends = (
            f"Token authentication is {mode} in this server's environment (RAY_AUTH_MODE), so "
            "Ray sends no token at all to a cluster given by its address; once it is on, the "
            f"token comes from {token_source()}."
        )
    return RayTokenRefusedError(
        f"The Ray cluster at {address} refused this server's token: {said}. {sends}",
        "Set RAY_AUTH_MODE=token in the server's environment and give it the cluster's token "
        "(`ray get-auth-token` on the head prints it) through RAY_AUTH_TOKEN, "
        "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token, in Ray's order of precedence "
        "(docs/DISTRIBUTED.md). Never set RAY_AUTH_MODE=disabled.",
    )


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
