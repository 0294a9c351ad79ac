"""Collection and measurement: harness rendering, the subprocess runner, ncu, extraction, aggregation, the run store."""
