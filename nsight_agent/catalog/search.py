"""Metric search: the catalog's metrics whose name or description match a few words, best
first (the ``query_metrics`` tool, ``nsight-agent metrics``)."""

from __future__ import annotations

import re

from nsight_agent.catalog.metrics import BREAKDOWN_PREFIX, MetricInfo, load_catalog


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9_.]+", text.lower()) if w]


def _score(info: MetricInfo, query: str, words: list[str]) -> float:
    name = info.name.lower()
    desc = info.description.lower()
    score = 0.0
    if name == query:
        score += 100
    elif name.startswith(query):
        score += 40
    elif query in name:
        score += 25
    desc_words = set(re.split(r"[^a-z0-9_]+", desc))
    name_parts = set(re.split(r"[_.]+", name))
    for word in words:
        if word in name_parts:
            score += 12
        elif word in name:
            score += 8
        if word in desc_words:
            score += 6
        elif word in desc:
            score += 3
    if score == 0:
        return 0.0
    # Prefer the common, short names over long qualified variants and triage groups.
    return score - len(name) / 100 - (5 if "." in name else 0)


def search_metrics(query: str, limit: int = 20) -> list[MetricInfo]:
    """Metrics whose name or description match ``query``, best first.

    Every word of the query must appear in the name or the description; a full name with a
    suffix (``dram__bytes.sum``) finds its base metric first. ``MetricInfo.source`` says which
    list answered.
    """
    cat = load_catalog()
    query_text = query.strip().lower()
    if not query_text or limit <= 0:
        return []
    resolved = cat.resolve(query.strip().removeprefix(BREAKDOWN_PREFIX))
    exact = resolved[0] if resolved is not None else None
    if exact is not None:
        query_text = exact.name.lower()  # a full name: search around its base
    words = _words(query_text)
    scored: list[tuple[float, str]] = []
    for info in cat.metrics.values():
        haystack = f"{info.name.lower()} {info.description.lower()}"
        if info is not exact and not all(w in haystack for w in words):
            continue
        score = 1000.0 if info is exact else _score(info, query_text, words)
        if score > 0:
            scored.append((score, info.name))
    scored.sort(key=lambda item: (-item[0], item[1]))
    return [cat.metrics[name] for _, name in scored[:limit]]


def close_names(query: str, limit: int = 5) -> list[str]:
    """What to offer when ``search_metrics`` finds nothing: names close to a misspelt metric
    name (``dram__byts.sum``), else the best metrics matching any one word of the query."""
    from nsight_agent.catalog.metrics import suggest

    close = suggest(query.strip(), limit=limit)
    if close:
        return close
    found: dict[str, None] = {}
    for word in _words(query.lower()):
        for info in search_metrics(word, limit):
            found.setdefault(info.example, None)
    return list(found)[:limit]
