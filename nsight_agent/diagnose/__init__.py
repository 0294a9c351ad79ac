"""The diagnose stage: what bounds a kernel and why, from one report action at a time.

``metrics`` (names, sections, a reader) -> ``throughput`` (speed of light), ``roofline``
(position and bound), ``findings`` (ncu's own rules).

Cause diagnosis (docs/DIAGNOSIS.md): ``thresholds`` (every cut-off) and ``vocabulary`` (cause
ids) -> ``bound`` (roofline-aware bound) -> ``checks_memory`` / ``checks_compute`` /
``checks_launch`` (one pure check per cause, registered in ``checks``; models in ``cause``) ->
``kernel.diagnose_action`` (ranked causes, sections collected, under 2 KB of JSON).

A report of many kernels (docs/DIAGNOSIS.md, "The step"): ``places`` (where each kernel ran,
kernels by time per place) -> ``step`` (causes of the whole step) -> ``step_view`` (groups,
owners, Amdahl bounds, and a pointer for a kernel without a cause of its own).
"""
