"""The engine: rooms by job (harness, store, collection, worker, executors) around one
pipeline (``pipeline.py``) that states the order of a job's stages; docs/ARCHITECTURE.md maps it."""
