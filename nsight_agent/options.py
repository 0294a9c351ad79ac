"""ncu's collection choices and the time metric, as plain names.

Apart from ``request`` (pydantic, a slow import) because the nsight-python API's
decorating import needs only these: every script that profiles pays that import before its
first call.
"""

from __future__ import annotations

from typing import Literal

ReplayMode = Literal["kernel", "range"]
CacheControl = Literal["all", "none"]
ClockControl = Literal["base", "none"]

# The metric every timing answer is read from: ncu's kernel duration.
TIME_METRIC = "gpu__time_duration.sum"
# The shortest limit a run may be given, on every front end: ncu's own start and one call.
MIN_TIMEOUT_S = 10
