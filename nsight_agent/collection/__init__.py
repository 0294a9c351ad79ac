"""Collection: run a Python entry once under ncu and hand back the report."""
