"""KernelBench's own timing of a problem's candidate and reference, for
``bench/kernelbench_timing.py``: a subprocess kept for the whole run (``Peer``), one problem a
line on its stdin, one ``MARK`` line back each (KernelBench prints its own lines before it).
It loads KernelBench's ``timing.py`` from the checkout and times with its
``time_execution_with_cuda_event``: the candidate first, then the reference, as its eval
takes them, the same trial count, under ``torch.no_grad`` as our entries run. A CUDA error
ends the process, never the bench's: the next problem starts it again.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from bench import kernelbench_sweep as sweep
from bench.results import ROOT

MARK = "KB_TIMING_PEER "


class Peer:
    """The peer process: one problem a line on its stdin, one ``MARK`` line back each."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.proc: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str | None] = queue.Queue()

    def start(self) -> subprocess.Popen[str]:
        if self.proc is None or self.proc.poll() is not None:
            cmd = [sys.executable, "-m", "bench.kernelbench_peer"]
            self.proc = subprocess.Popen(
                [*cmd, "--kb", str(self.args.kb)],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
            assert self.proc.stdout is not None
            self.lines = reader(self.proc.stdout)
        return self.proc

    def time(self, candidate: str, timeout: float) -> dict[str, Any]:
        """KernelBench's times of ``candidate`` (a problem's source with its ``ModelNew``)."""
        proc = self.start()
        assert proc.stdin is not None
        ask = {"source": candidate, "trials": self.args.trials, "seed": self.args.seed}
        proc.stdin.write(json.dumps(ask) + "\n")
        proc.stdin.flush()
        found = _answer(self.lines, time.monotonic() + timeout)
        if found is None:
            self.close()
            raise sweep.Failed(f"kernelbench: no answer within {timeout:.0f} s (or it died)")
        if "error" in found:
            raise sweep.Failed(f"kernelbench: {found['error']}")
        return found

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc = None


def reader(out: IO[str]) -> queue.Queue[str | None]:
    """The lines of ``out`` as they come, read by a thread of their own; None at its end."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in out:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _answer(lines: queue.Queue[str | None], deadline: float) -> dict[str, Any] | None:
    """The next ``MARK`` line (KernelBench prints its own lines before it), or None at the
    end of the output or past ``deadline``."""
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None
        if line is None:
            lines.put(None)  # the end stays the end for the next reader
            return None
        if line.startswith(MARK):
            found: dict[str, Any] = json.loads(line[len(MARK) :])
            return found


def main(argv: list[str] | None = None) -> int:
    """Answer each asked problem with KernelBench's mean times (ms) of candidate and
    reference, as its eval takes them: the candidate first."""
    import torch

    ap = argparse.ArgumentParser(description="KernelBench's timing, one problem a line")
    ap.add_argument("--kb", type=Path, required=True, help="KernelBench checkout")
    timing = sweep.kb_timing(ap.parse_args(argv).kb)
    device = torch.device("cuda", torch.cuda.current_device())
    for line in sys.stdin:
        ask = json.loads(line)
        try:
            found = _peer_one(torch, timing, device, ask)
        except Exception as err:
            found = {"error": sweep.cause_of(err)}
        torch.cuda.empty_cache()
        print(MARK + json.dumps(found), flush=True)
    return 0


def _peer_one(torch: Any, timing: Any, device: Any, ask: dict[str, Any]) -> dict[str, Any]:
    """One candidate's and its reference's times; its file lives while they are timed (a
    compiler may read it again)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kb_candidate.py"
        path.write_text(ask["source"])
        module = sweep.load_file(f"kb_candidate_{os.getpid()}_{time.monotonic_ns()}", path)
        return _times(torch, timing, device, module, ask)


def _times(
    torch: Any, timing: Any, device: Any, module: Any, ask: dict[str, Any]
) -> dict[str, Any]:
    def on_device(values: Any) -> list[Any]:
        return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]

    found: dict[str, Any] = {"device": torch.cuda.get_device_name(device)}
    with torch.no_grad():
        torch.manual_seed(ask["seed"])
        inputs = on_device(module.get_inputs())
        init = getattr(module, "get_init_inputs", list)
        for name, cls in (("new", module.ModelNew), ("ref", module.Model)):
            torch.manual_seed(ask["seed"])
            model = cls(*on_device(init())).to(device)
            times = timing.time_execution_with_cuda_event(
                model, inputs, num_trials=ask["trials"], verbose=False, device=device
            )
            found[name] = {"mean_ms": statistics.fmean(times), "trials": len(times)}
            del model
    return found


if __name__ == "__main__":
    sys.exit(main())
