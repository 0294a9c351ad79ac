"""The step view through a real MCP client, on a GPU machine with ncu.

Starts ``nsight-agent serve`` over stdio, calls ``diagnose_kernel`` on the two step examples
(examples/contract/torch_encoder_layer.py, step_unfused_chain.py) and keeps, per call: the wall
time, the answer's size (whole, and the step summary), the step's groups (owner, share, Amdahl
bound), its causes, and each diagnosed kernel's owner, headline and first action.

    python3 -m bench.step_view [--out DIR] [--only NAME]

writes DIR/step_view.json (the brief), DIR/answer_NAME.json (each whole answer) and
DIR/reports_NAME.tar.xz (the run's reports, to read again on a machine without a GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    ("chain", "examples/contract/step_unfused_chain.py", "triton", [{"n": 4096}]),
    ("layer", "examples/contract/torch_encoder_layer.py", "torch", [{"batch": 8, "seq": 512}]),
]


def _brief(d: dict[str, Any]) -> dict[str, Any]:
    step = d.get("step") or {}
    kernels = []
    for k in d.get("kernels", []):
        dg = k["diagnosis"]
        top = (dg.get("causes") or [{}])[0]
        kernels.append(
            {
                "op": k.get("op"),
                "kernel": dg["kernel"][:50],
                "owner": (dg.get("owner") or {}).get("who"),
                "share": k.get("share_pct"),
                "headline": dg["headline"],
                "precision": dg["bound"].get("precision"),
                "action": (top.get("actions") or [""])[0][:100],
            }
        )
    others = [
        {
            "op": o.get("op"),
            "kernel": o["kernel"][:40],
            "share": o.get("share_pct"),
            "headline": o["headline"],
        }
        for o in d.get("others") or []
    ]
    return {"step": step, "kernels": kernels, "others": others, "passes": d.get("passes")}


def _keep_reports(runs: Path, run_id: str, dest: Path) -> None:
    """The run's .ncu-rep files, xz-compressed (a step's reports are megabytes each)."""
    reports = sorted((runs / run_id).rglob("*.ncu-rep")) if run_id else []
    if reports:
        with tarfile.open(dest, "w:xz", preset=9) as tar:
            for rep in reports:
                tar.add(rep, arcname=str(rep.relative_to(runs)))


async def main(out: Path, only: str | None) -> None:
    runs = Path(tempfile.mkdtemp(prefix="sv-runs-"))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "nsight_agent", "serve", "--runs-root", str(runs)],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    found: dict[str, Any] = {}
    async with Client(params, read_timeout_seconds=600) as client:
        for name, path, language, configs in CASES:
            if only and name != only:
                continue
            args = {"source": (ROOT / path).read_text(), "language": language, "configs": configs}
            t = time.monotonic()
            result = await client.call_tool("diagnose_kernel", args)
            seconds = time.monotonic() - t
            data = result.structured_content or {}
            if result.is_error or not data:
                text = " ".join(getattr(c, "text", "") for c in result.content)
                found[name] = {"error": text[:2000], "seconds": round(seconds, 1)}
                print(name, "ERROR", text[:800], flush=True)
                continue
            found[name] = {
                "seconds": round(seconds, 1),
                "answer_bytes": len(json.dumps(data, separators=(",", ":"))),
                "step_bytes": len(json.dumps(data.get("step") or {}, separators=(",", ":"))),
                **_brief(data),
            }
            print(name, json.dumps(found[name]), flush=True)
            out.mkdir(parents=True, exist_ok=True)  # after each case: a timeout keeps the rest
            (out / "step_view.json").write_text(json.dumps(found, indent=1))
            (out / f"answer_{name}.json").write_text(json.dumps(data, indent=1))
            _keep_reports(runs, str(data.get("run_id") or ""), out / f"reports_{name}.tar.xz")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--only", choices=[c[0] for c in CASES])
    args = ap.parse_args()
    anyio.run(main, Path(args.out), args.only)
