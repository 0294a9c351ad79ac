"""Experimental APIs of nsight-python, under the same names: ``collect``, ``CollectionScope``,
``InfoCollector`` (information collectors for ``analyze.kernel(info_collectors=...)``).

They may change without the compatibility guarantees of the stable surface, as in nsight-python.
"""

from __future__ import annotations

from nsight_agent.experimental.info_collectors import CollectionScope, InfoCollector, collect

__all__ = ["CollectionScope", "InfoCollector", "collect"]
