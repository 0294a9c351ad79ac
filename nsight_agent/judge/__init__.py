"""The decisions, as functions over a run or a read report, one module a job:

    run            what is read of a run (``RunLike``) and its frame: configs, variants, checks
    verdicts       the interval rule per config, one verdict per variant
    copies         copies and memsets counted in an ncu run's call time
    comparison     a run's variants against its baseline
    gate           between-run drift, machine speed and noise, the regression rule
    comparability  whether two runs may be compared, and each run's identity
    run_diff       a run against a baseline: comparable, then drift-widened verdicts
    history        one kernel's runs against a reference
    builds         what a run's compiles cost
    run_warnings   what a run's answer warns of
    reading        a report's kernels and their NVTX ranges; a run's report and calls
    step           the step view: groups, owners, Amdahl bounds, step causes
    diagnosis      a report's diagnosis: which kernels, their causes, the step, sampling

The service calls them; the views shape what they return into answers. They read the engine
and ``diagnose``, never a view, the service or a front end.
"""
