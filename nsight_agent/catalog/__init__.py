"""Names the profiler accepts: metric search and validation, section names, the skill bundles of `skills/`."""
