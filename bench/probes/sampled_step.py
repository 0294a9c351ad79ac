"""Probe (issue 36's step view): a KernelBench level-3 model's step diagnosed with every launch
profiled and with one launch per launch configuration (``sample_launches``), through the
product's own ``diagnose_source``; do the two read the same?

Prints and writes, per mode: seconds, launches, the step's groups (label, launches, share),
its causes, the first kernel's headline and cause, each kernel diagnosed in full (name,
operator, share, launches, headline, cause), and the sampled note.

    python3 -m bench.probes.sampled_step --kb .kb [--model 9_ResNet18.py] [--modes full,sampled]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def read(d: Any, seconds: float) -> dict[str, Any]:
    step = d.step
    first = d.kernels[0].diagnosis if d.kernels else None
    return {
        "seconds": round(seconds, 1),
        "run_id": d.run_id,
        "sampled": d.sampled,
        "launches": step.launches if step else None,
        "gpu_us": step.gpu_us if step else None,
        "groups": [[g.group, g.launches, g.share_pct] for g in step.groups] if step else [],
        "causes": [c.id for c in step.causes or []] if step else [],
        "headline": first.headline[:160] if first else None,
        "top_cause": first.causes[0].id if first and first.causes else None,
        # each kernel diagnosed in full: which launch stood for it shows in its bound and cause
        "kernels": [
            [
                k.diagnosis.kernel[:70],
                (k.op or "")[:50],
                k.share_pct,
                k.launches,
                k.diagnosis.headline[:110],
                k.diagnosis.causes[0].id if k.diagnosis.causes else None,
            ]
            for k in d.kernels
        ],
    }


def main(argv: list[str] | None = None) -> int:
    from nsight_agent.service.diagnose import diagnose_source
    from nsight_agent.service.measure import Measuring

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--kb", type=Path, default=Path(".kb"))
    ap.add_argument("--model", default="9_ResNet18.py")
    ap.add_argument("--modes", default="full,sampled")
    ap.add_argument("--timeout-s", type=float, default=280.0)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    args = ap.parse_args(argv)
    source = (args.kb / "KernelBench" / "level3" / args.model).read_text()
    found: dict[str, Any] = {"model": args.model}
    for mode in args.modes.split(","):
        start = time.monotonic()
        try:
            d = diagnose_source(
                {"source": source, "timeout_s": args.timeout_s},
                Measuring(),
                deep=False,
                limit=20,
                sample_launches=mode == "sampled",
            )
            found[mode] = read(d, time.monotonic() - start)
        except Exception as err:  # one mode failing is a result, not the end of the probe
            found[mode] = {"error": f"{type(err).__name__}: {err}"[:500]}
        print(f"== {args.model} {mode}: {json.dumps(found[mode])[:1500]}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    name = Path(args.model).stem
    (args.out / f"sampled_step_{name}.json").write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
