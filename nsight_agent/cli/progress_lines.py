"""Progress as plain lines, for a stderr that is not a terminal (an agent, CI, a log file):
one line when a stage begins, and within a long stage (a config's runs) at most one line
every few seconds, so a reader sees where the time goes without a line per call.

The stage of a text is what comes before its first colon (``nsight_agent/stages.py``). When a
stage ends, the last line it held back is shown first ("config 1 of 2: run 23 (adaptive)"),
so the count it reached is never lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nsight_agent.stages import stage_of

EVERY_S = 5.0
Line = tuple[float, str]  # (seconds since the start, text)


@dataclass
class PlainLines:
    """Which progress events become lines; ``feed`` and ``end`` return the lines to print."""

    every_s: float = EVERY_S
    _stage: str | None = None
    _shown_at: float = 0.0
    _held: Line | None = None
    _last: str | None = field(default=None, repr=False)

    def feed(self, now: float, done: int, total: int, message: str) -> list[Line]:
        """Lines for an event at ``now`` (seconds since the start), each with its time."""
        text = message + (f" ({done}/{total} calls)" if total and done else "")
        if text == self._last:
            return []
        stage = stage_of(message)
        out: list[Line] = []
        if stage != self._stage:
            if self._held is not None:
                out.append(self._held)
            self._stage = stage
        elif now - self._shown_at < self.every_s:
            self._held = (now, text)
            return []
        self._held, self._shown_at, self._last = None, now, text
        return [*out, (now, text)]

    def end(self) -> list[Line]:
        """The line a stage held back when the call ends."""
        held, self._held = self._held, None
        return [held] if held is not None else []


def render(line: Line) -> str:
    """ "[  12.3 s] config 1 of 2: run 7 (adaptive)"."""
    return f"[{line[0]:6.1f} s] {line[1]}"
