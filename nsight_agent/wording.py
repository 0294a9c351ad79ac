"""How answers carry text: whole where it fits, else cut at a sentence or a word and marked.

Shared by the judge (the messages of its verdicts) and the views (notes, findings), so a
message is never cut mid-word on any path.
"""

from __future__ import annotations

# Far above what the harness writes (its compile errors stop near 2,000 characters): only a
# message an exception made that long is cut.
MESSAGE_CHARS = 4000


def clip(text: str, limit: int) -> str:
    """``text`` whole when it fits in ``limit`` characters; else cut after the last sentence
    that fits, or at the last word boundary, and marked with "..." (never mid-word)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    room = max(1, limit - 3)
    head = text[:room]
    sentence = max(head.rfind(". "), head.rfind("; "), head.rfind(": "))
    if sentence >= room * 3 // 4:  # a whole sentence, unless that drops much more text
        return head[: sentence + 1].rstrip(";:") + " ..."
    space = head.rfind(" ")
    cut = head[:space] if space >= room // 2 else head
    return cut.rstrip(" ,;:.") + "..."


def whole(text: str) -> str:
    """A check's, suspect's or error's message as it was written; past ``MESSAGE_CHARS``, cut
    at a sentence or word and marked so (the run's result.json keeps it whole)."""
    if len(text) <= MESSAGE_CHARS:
        return text
    return clip(text, MESSAGE_CHARS) + " [cut; the run's result.json holds the whole message]"
