"""The harness: a runnable program around a user's kernel source, and the code it runs.

``render`` writes a run folder (the sources and ``harness.py``: SPEC and a call into
``program``) and, with ``cuda_build``, is imported by the pipeline (no torch needed).
Everything else runs where the user's code runs (the harness process, the warm timing
worker): ``sources`` loads a run's sources through the language's adapter (``languages/``),
``verdicts`` judges outputs, ``runtime`` calls the user's functions.
"""
