"""Collection: runs of the harness (the pre-flight without ncu, the ncu run) and the reading of what they leave (report -> rows -> aggregated frame)."""
