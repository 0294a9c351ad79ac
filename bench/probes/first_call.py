"""Why a server's first profile is slower than its later ones, on a GPU machine with ncu.

For each delay, a fresh ``nsight-agent serve`` (pre-launched targets on, their steps stamped):
wait DELAY seconds after the client connected, call ``profile_kernel`` (the prelaunch suite's
torch kernel), then once a target is ready again, call it once more. Per call: its seconds, its
run's stages, and the target's markers span (the first profiled kernel: ncu's setup in the
target). A first call that costs what the second does after a delay says the extra is the
young target's (or the start's contention), not the machine's.

    python3 -m bench.probes.first_call [--delays 0 4 12] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any

import anyio

from bench import prelaunch, results


def _span(events: list[dict[str, Any]], first: str, last: str) -> float | None:
    seen: dict[str, float] = {}
    for e in events:
        seen.setdefault(str(e["what"]), float(e["t"]))
    if first in seen and last in seen:
        return round(seen[last] - seen[first], 3)
    return None


async def one(delay: float) -> dict[str, Any]:
    stamps, stamped = prelaunch.target_stamps()
    out: dict[str, Any] = {"delay_s": delay, "calls": []}
    async with contextlib.AsyncExitStack() as stack:
        start = time.monotonic()
        server = await stack.enter_async_context(prelaunch.server("probe", "1", **stamps))
        out["connect_s"] = round(time.monotonic() - start, 3)
        out["slot_at_connect"] = await server.first_slot()
        await anyio.sleep(delay)
        for n in range(2):
            if n:
                await server.wait_ready()
            stamped.write_text("")
            called = time.time()
            seconds, answer = await server.call("profile_kernel", prelaunch.PROFILE)
            events = prelaunch.stamps_since(stamped, called)
            out["calls"].append(
                {
                    "seconds": round(seconds, 3),
                    "path": answer.get("collection"),
                    "stages": server.stages(answer),
                    "harness_start": _span(events, "harness start", "harness start"),
                    "markers": _span(events, "markers: BEGIN launching", "markers: call starts"),
                    "events": events,
                }
            )
            prelaunch.say(f"delay {delay:g}: call {n} {seconds:.3f} s {answer.get('collection')}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delays", type=float, nargs="+", default=[0.0, 4.0, 12.0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    async def run() -> list[dict[str, Any]]:
        return [await one(d) for d in args.delays]

    results.emit(anyio.run(run), args.out, "first_call.json")


if __name__ == "__main__":
    main()
