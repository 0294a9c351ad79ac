"""The collect stage: every call of a run under ncu in one process, in one way chosen for the
job before its pre-flight (``choose.py``); each way is a module that owns its overlap with the
pre-flight, its fallback and the path its answer reports (``strategy.py``).

    cold       the harness launched under ncu after the pre-flight; where every way falls back
    early      the same cold launch started beside the pre-flight, waiting at a gate
    attached   a pre-launched target (``attach.py``), cold where none is ready or it fails
    plain      a job asking for what an attach cannot give, served without it by a target
               where the pre-flight shows it would add nothing; else cold
    budgeted   a way with the sections that fit a budget, fitted after the pre-flight

``profiled.py`` runs the harness cold or through a target and reads the outcome alike.
"""
