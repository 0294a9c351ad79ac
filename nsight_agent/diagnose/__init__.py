"""The diagnose stage: what bounds a kernel and why, from one report action at a time.

``metrics`` (names, sections, a reader) -> ``throughput`` (speed of light), ``roofline``
(position and bound), ``findings`` (ncu's own rules).
"""
