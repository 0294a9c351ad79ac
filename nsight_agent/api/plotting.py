"""``analyze.plot``: draws the ``ProfileResults`` of the ``analyze.kernel`` function below it.
Its imports (matplotlib, a slow one) run in a thread while the profile call waits on ncu."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from nsight_agent.api import compat, prefetch
from nsight_agent.errors import InvalidRequestError


class PlottedFunction:
    """``analyze.plot`` around a profiled function: plots each result and returns it."""

    _nsight_agent_wrapper = True

    def __init__(self, func: Callable[..., Any], options: dict[str, Any]) -> None:
        self.func = func
        self.options = options
        functools.update_wrapper(self, func, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # matplotlib's import (a slow one) overlaps the profile call, which waits on ncu.
        imports = prefetch.start("nsight_agent.views.plot", name="nsight-agent-plot-import")
        results = self.func(*args, **kwargs)
        imports.join()
        from nsight_agent.api.results import ProfileResults

        if not isinstance(results, ProfileResults):
            raise InvalidRequestError(
                "@analyze.plot must be placed above @analyze.kernel (it plots ProfileResults)."
            )
        from nsight_agent.views.plot import plot_dataframe

        frame = results.to_dataframe()
        compat.check_plot_metric(
            list(dict.fromkeys(map(str, frame["Metric"]))), self.options["metric"]
        )
        plot_dataframe(frame, results.param_names, **self.options)
        return results


def plot(
    filename: str = "plot.png",
    *,
    metric: str | None = None,
    title: str = "",
    ylabel: str | None = None,
    annotate_points: bool = False,
    show_aggregate: str | None = None,
    plot_type: str = "line",
    plot_width: int = 6,
    plot_height: int = 4,
    row_panels: Sequence[str] | None = None,
    col_panels: Sequence[str] | None = None,
    x_keys: Sequence[str] | None = None,
    print_data: bool = False,
    variant_fields: Sequence[str] | None = None,
    variant_annotations: Sequence[str] | None = None,
    plot_callback: Callable[[Any], None] | None = None,
) -> Callable[[Callable[..., Any]], PlottedFunction]:
    """Plot the ProfileResults of the ``analyze.kernel`` function below it into ``filename``."""
    # Every parameter, by name, is one of views.plot.plot_dataframe's keywords.
    options: dict[str, Any] = dict(locals())
    return lambda func: PlottedFunction(func, options)
