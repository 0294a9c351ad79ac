"""A local Ray cluster started by the executor from a short-lived thread (as the server's
worker threads do) keeps running after that thread ends. Its own module: it needs Ray not yet
initialised, unlike tests/test_engine_ray_executor.py's shared cluster."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason='Ray is not installed (pip install ".[ray]" in a clone)')

from nsight_agent.engine.executors.base import Job  # noqa: E402
from nsight_agent.engine.executors.ray.executor import RESOURCE, RayExecutor  # noqa: E402
from nsight_agent.engine.pipeline import PreflightResult  # noqa: E402
from nsight_agent.request import ProfileRequest  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(1800)]

SOURCE = """
import torch

def setup(n, device="cuda"):
    return (torch.arange(n, device=device, dtype=torch.float32),)

def run(x):
    return x * 2
"""


def test_a_local_cluster_outlives_the_thread_that_started_it(tmp_path: Path) -> None:
    if ray.is_initialized():
        ray.shutdown()
    pool = RayExecutor(
        queue_timeout_s=600,  # the host starts cold: a bound on a hang, not a measure
        init_kwargs={
            "num_cpus": 2,
            "num_gpus": 1,
            "resources": {RESOURCE: 1},
            "include_dashboard": False,
        },
    )
    starter = threading.Thread(target=pool.connect)
    starter.start()
    starter.join()  # the thread that asked for the cluster is gone
    time.sleep(2)
    try:
        req = ProfileRequest(source=SOURCE, language="torch", configs={"n": [64]}, runs=1)
        pre = pool.submit(Job(req, tmp_path, mode="preflight")).result(600)
        assert isinstance(pre, PreflightResult) and pre.ok, pre
        # Its own cluster: a host on every GPU from the start (one logical GPU here).
        assert [h["state"] for h in pool.pool_info()["hosts"]] == ["idle"]
    finally:
        pool.close()
    assert not ray.is_initialized()
