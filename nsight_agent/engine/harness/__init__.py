"""Harnesses from templates: render a runnable program around a user's kernel source.

``render`` and ``cuda_build`` are imported by the pipeline (no torch needed); ``runtime`` and
``checks`` run inside the rendered harness, next to the user's code.
"""
