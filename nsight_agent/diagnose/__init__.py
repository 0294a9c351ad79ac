"""The diagnose stage: what bounds a kernel and why, from one report action at a time.

``metrics`` (names, sections, a reader) -> ``throughput`` (speed of light), ``roofline``
(position and bound), ``findings`` (ncu's own rules).

Cause diagnosis (docs/DIAGNOSIS.md): ``thresholds`` (every cut-off) and ``vocabulary`` (cause
ids) -> ``bound`` (roofline-aware bound) -> ``checks_memory`` / ``checks_compute`` /
``checks_launch`` (one pure check per cause, registered in ``checks``; models in ``cause``) ->
``kernel.diagnose_action`` (ranked causes, sections collected, under 2 KB of JSON).
"""
