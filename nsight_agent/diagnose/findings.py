"""ncu's own guided-analysis findings (rule results) of one kernel, in plain text."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field

from nsight_agent.diagnose.metrics import ActionLike

FindingType = Literal["none", "ok", "optimization", "warning", "error"]

# ncu_report's MsgType values (tests check them against the installed ncu_report).
MESSAGE_TYPES: dict[int, FindingType] = {
    0: "none",
    1: "ok",
    2: "optimization",
    3: "warning",
    4: "error",
}
# ncu_report's SpeedupType: LOCAL = gain of the unit the rule looks at, in isolation;
# GLOBAL = reduction of the whole kernel's run time.
SPEEDUP_TYPES: dict[int, Literal["local", "global"]] = {1: "local", 2: "global"}
# ncu_report's FocusSeverity.
FOCUS_SEVERITIES: dict[int, Literal["default", "low", "high"]] = {0: "default", 1: "low", 2: "high"}


class FocusMetric(BaseModel):
    name: str
    value: float | None
    severity: Literal["default", "low", "high"]
    info: str


class Finding(BaseModel):
    """One result of ncu's guided analysis (a rule), in plain text."""

    rule_id: str
    rule_name: str
    section: str
    title: str = Field(description="The message title, or the rule name when ncu gave none")
    message: str = Field(description="ncu's message with its link markup turned into plain text")
    type: FindingType
    estimated_speedup_pct: float | None = Field(
        description="ncu's estimate of the gain if the issue were fixed, in %"
    )
    speedup_type: Literal["local", "global"] | None = Field(
        description="global: less run time of the whole kernel; local: better use of the one "
        "unit the rule looks at, in isolation"
    )
    focus_metrics: list[FocusMetric]
    linked_sections: list[str] = Field(description="Section identifiers the message points to")
    links: list[str] = Field(description="URLs the message points to")


_MARKUP = re.compile(r"@(url|section|sass|source):([^@]*)@")
_URL_BODY = re.compile(r"^(?P<text>.*?):(?P<link>[A-Za-z][A-Za-z0-9+.-]*://.*)$")
_SOURCE_BODY = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<text>.*)$")


def plain_text(message: str) -> tuple[str, list[str], list[str]]:
    """(text, section identifiers, URLs) from a message with ncu's ``@kind:...@`` links."""
    sections: list[str] = []
    links: list[str] = []

    def replace(match: re.Match[str]) -> str:
        kind, body = match.group(1), match.group(2)
        if kind == "url":
            url = _URL_BODY.match(body)
            if url:
                links.append(url["link"])
                return url["text"]
            return body
        if kind == "source":
            source = _SOURCE_BODY.match(body)
            if source:
                return f"{source['text']} ({source['file']}:{source['line']})"
            return body
        target, _, text = body.partition(":")
        if kind == "section":
            sections.append(target)
        return text or target

    text = _MARKUP.sub(replace, message)
    return " ".join(text.split()), list(dict.fromkeys(sections)), list(dict.fromkeys(links))


# ncu's rule messages describe first and advise later ("... Consider reducing ...", "Check the
# Source Counters section ..."). A sentence is advice when it opens with an imperative or turns
# to one after a clause ("If you ..., consider ..."). Pointers to a guide come last.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])|(?<=[a-z%)][.])(?=[A-Z][a-z])")
_IMPERATIVE = re.compile(
    r"^(Consider|Check|Find|To|Make sure|Avoid|Try|Use|Reduce|Increase|Decrease|Verify|Ensure|"
    r"Look|Improve|Restructure|Move|Compile|Enable|Disable|Launch|Optimize|Collect|Review|"
    r"Minimize|Maximize|Limit|Align|Change|Split|Combine|Fuse|Prefer)\b"
)
_TURN = re.compile(
    r"(?:[,:]\s*|\byou may\s+)(consider|try|trying to|use|check|reduce|increase|look)\b", re.I
)
_POINTER = re.compile(r"^See\b")


def sentences(text: str) -> list[str]:
    """``text`` cut into sentences (ncu sometimes omits the space after a full stop)."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def ncu_advice(message: str) -> str | None:
    """The first sentence of an ncu rule message that says what to do, or None when the
    message only describes (its first sentence is then no action)."""
    said = sentences(message)
    for s in said:
        if _IMPERATIVE.match(s) or _TURN.search(s):
            return s
    return next((s for s in said if _POINTER.match(s)), None)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(float(value)) else None


def _as_int(value: object) -> int:
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return -1


def _finding(raw: Mapping[str, Any]) -> Finding | None:
    msg = raw.get("rule_message") or {}
    text, sections, links = plain_text(str(msg.get("message", "")))
    rule_name = str(raw.get("name", ""))
    title = " ".join(str(msg.get("title", "")).split())
    if not text and not title:
        return None
    speedup = raw.get("speedup_estimation") or {}
    focus = [
        FocusMetric(
            name=str(f.get("name", "")),
            value=_number(f.get("value")),
            severity=FOCUS_SEVERITIES.get(_as_int(f.get("severity")), "default"),
            info=str(f.get("info", "")),
        )
        for f in raw.get("focus_metrics") or []
    ]
    return Finding(
        rule_id=str(raw.get("rule_identifier", "")),
        rule_name=rule_name,
        section=str(raw.get("section_identifier", "")),
        title=title or rule_name,
        message=text,
        type=MESSAGE_TYPES.get(_as_int(msg.get("type")), "none"),
        estimated_speedup_pct=_number(speedup.get("speedup")),
        speedup_type=SPEEDUP_TYPES.get(_as_int(speedup.get("type"))),
        focus_metrics=focus,
        linked_sections=sections,
        links=links,
    )


_TYPE_ORDER: dict[FindingType, int] = {
    "error": 0,
    "warning": 1,
    "optimization": 2,
    "ok": 3,
    "none": 4,
}


def findings(action: ActionLike) -> list[Finding]:
    """ncu's rule results for one kernel, largest estimated speedup first.

    Results with neither a title nor a message are dropped. Results without an estimate
    follow, errors and warnings before optimizations and plain information.
    """
    out = [f for f in map(_finding, action.rule_results_as_dicts()) if f is not None]
    out.sort(
        key=lambda f: (
            f.estimated_speedup_pct is None,
            -(f.estimated_speedup_pct or 0.0),
            _TYPE_ORDER[f.type],
            f.rule_id,
        )
    )
    return out
