"""Probe (H200): the demo source's pre-flight on the GPU, with the persisting-L2 reset's
return codes and the library it loaded, to explain a check-stage CUDA error."""

from __future__ import annotations

import ctypes
import json
import tempfile
from pathlib import Path

import torch

from nsight_agent import demo
from nsight_agent.engine import pipeline
from nsight_agent.engine.harness import integrity
from nsight_agent.request import ProfileRequest

torch.zeros(1, device="cuda")
lib = integrity._cudart()
print("cudart:", getattr(lib, "_name", None))
if lib is not None:
    print("reset:", lib.cudaCtxResetPersistingL2Cache())
    print("setlimit:", lib.cudaDeviceSetLimit(0x06, ctypes.c_size_t(0)))
    print("lasterror:", lib.cudaGetLastError())
print("reset_persisting_l2() ->", integrity.reset_persisting_l2())
x = torch.ones(4, device="cuda")
print("torch op after reset:", float((x * 2).sum()))
req = ProfileRequest(source=demo.EXAMPLE_SOURCE, configs=demo.CONFIGS[:2], runs=3)
with tempfile.TemporaryDirectory() as tmp:
    pre = pipeline.preflight(req, runs_root=Path(tmp), device="cuda")
    print("preflight ok:", pre.ok, pre.stage, pre.errors[:2])
    for f in Path(tmp).rglob("preflight-error.json"):
        print(json.loads(f.read_text()).get("traceback", "")[-2500:])
