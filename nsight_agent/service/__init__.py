"""The use cases, one room each, that both front ends (the MCP server and the CLI) call:

    measure    the one measuring call: a request by ncu or timing, on the executor in use
    profile    profile_kernel, compare_variants, roofline_metrics: build the request, measure
    diagnose   diagnose_kernel: a report, an earlier run, or source profiled in stages
    runs       earlier runs: load, list, report and artifacts, plot, prune
    summaries  the answers of a run or a report: the judge decides, the views shape
    baselines  baselines, diff, the regression gate, history
    session    what a server holds across calls (executor, warm workers) and its device info

A front end translates its arguments, calls one use case, and renders what comes back with
``nsight_agent.views``; it reaches the engine through these modules only. Decisions are the
judge's (``nsight_agent.judge``): a use case calls it, then the views to shape its answer.
Blocking functions: the server runs them in a worker thread.
"""
