"""The nsight-python surface for scripts: `analyze.kernel`, `analyze.plot`, `ProfileResults`."""
