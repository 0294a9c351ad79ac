"""CPU tests of the matplotlib renderer (nsight_agent.views.plot.plot_dataframe)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure

from nsight_agent.views.plot import plot_dataframe

TIME = "gpu__time_duration.sum"
DRAM = "dram__bytes.sum"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_frame(
    annotations: tuple[str, ...] = ("torch", "triton"),
    sizes: tuple[int, ...] = (1024, 2048, 4096),
    blocks: tuple[int, ...] | None = None,
    dtypes: tuple[str, ...] | None = None,
    metrics: tuple[str, ...] = (TIME,),
    normalized: str | bool = False,
) -> pd.DataFrame:
    """A processed frame in nsight-python's column layout; parameters n[, block][, dtype]."""
    rows: list[dict[str, Any]] = []
    for metric in metrics:
        for a, annotation in enumerate(annotations):
            for n in sizes:
                for block in blocks or (None,):
                    for d, dtype in enumerate(dtypes or (None,)):
                        avg = (a + 1) * n / 100 + (block or 0) / 10 + d
                        row: dict[str, Any] = {"Annotation": annotation, "n": n}
                        if blocks:
                            row["block"] = block
                        if dtypes:
                            row["dtype"] = dtype
                        row |= {
                            "AvgValue": avg,
                            "StdDev": avg / 20,
                            "MinValue": avg * 0.9,
                            "MaxValue": avg * 1.1,
                            "NumRuns": 5,
                            "CI95_Lower": avg * 0.95,
                            "CI95_Upper": avg * 1.05,
                            "RelativeStdDevPct": 5.0,
                            "StableMeasurement": False,
                            "Metric": metric,
                            "Kernel": f"{annotation}_kernel",
                            "GPU": "NVIDIA H200",
                            "Host": "node7",
                            "ComputeClock": 1980,
                            "MemoryClock": 3201,
                            "Unit": "ns" if metric == TIME else "byte",
                            "Normalized": normalized,
                        }
                        rows.append(row)
    df = pd.DataFrame(rows)
    # Geomean per (Annotation, Metric), as the aggregation stage writes it.
    df["Geomean"] = df.groupby(["Annotation", "Metric"])["AvgValue"].transform(
        lambda v: float(np.exp(np.log(v).mean()))
    )
    return df


def params_of(df: pd.DataFrame) -> list[str]:
    return [p for p in ("n", "block", "dtype") if p in df.columns]


def legend_labels(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def tick_labels(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.get_xticklabels()]


def assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_MAGIC
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 50 and image.shape[1] > 50


def test_line_plot_writes_png_with_one_line_per_annotation(tmp_path: Path) -> None:
    df = make_frame()
    out = tmp_path / "line.png"
    fig = plot_dataframe(df, ["n"], filename=str(out), title="Matmul")
    assert isinstance(fig, Figure)
    assert_png(out)
    (ax,) = fig.axes
    assert legend_labels(ax) == ["torch", "triton"]
    assert tick_labels(ax) == ["1024", "2048", "4096"]
    assert ax.get_ylabel() == f"{TIME} (ns)"
    assert ax.get_xlabel() == "n"
    assert fig.get_suptitle() == "Matmul\nNVIDIA H200, node7"


def test_line_plot_points_and_stddev_error_bars(tmp_path: Path) -> None:
    df = make_frame()
    fig = plot_dataframe(df, ["n"], filename=str(tmp_path / "p.png"))
    (ax,) = fig.axes
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 2 and all(c.has_yerr for c in bars)
    triton = df[df["Annotation"] == "triton"]
    line = bars[1].lines[0]
    assert list(np.asarray(line.get_xdata())) == [0, 1, 2]
    assert list(np.asarray(line.get_ydata())) == pytest.approx(list(triton["AvgValue"]))
    assert ax.get_ylim()[0] == 0


def test_row_and_col_panels_make_a_grid(tmp_path: Path) -> None:
    df = make_frame(blocks=(64, 128), dtypes=("fp16", "bf16"))
    out = tmp_path / "grid.png"
    fig = plot_dataframe(
        df,
        params_of(df),
        filename=str(out),
        row_panels=["block"],
        col_panels=["dtype"],
        plot_width=3,
        plot_height=2,
    )
    assert_png(out)
    assert len(fig.axes) == 4
    assert [ax.get_title() for ax in fig.axes] == [
        "block=64, dtype=fp16",
        "block=64, dtype=bf16",
        "block=128, dtype=fp16",
        "block=128, dtype=bf16",
    ]
    assert tuple(fig.get_size_inches()) == (6.0, 4.0)
    # The y label sits on the first column only; each panel holds only its own rows.
    assert [bool(ax.get_ylabel()) for ax in fig.axes] == [True, False, True, False]
    bf16_128 = df[(df["block"] == 128) & (df["dtype"] == "bf16") & (df["Annotation"] == "torch")]
    line = fig.axes[3].containers[0].lines[0]
    assert list(np.asarray(line.get_ydata())) == pytest.approx(list(bf16_128["AvgValue"]))


def test_variant_fields_split_every_annotation(tmp_path: Path) -> None:
    df = make_frame(blocks=(64, 128))
    fig = plot_dataframe(
        df, params_of(df), filename=str(tmp_path / "v.png"), variant_fields=["block"]
    )
    (ax,) = fig.axes
    assert legend_labels(ax) == [
        "torch (block=64)",
        "torch (block=128)",
        "triton (block=64)",
        "triton (block=128)",
    ]
    assert tick_labels(ax) == ["1024", "2048", "4096"]


def test_variant_annotations_restrict_the_split_and_merge_the_rest(tmp_path: Path) -> None:
    df = make_frame(blocks=(64, 128))
    fig = plot_dataframe(
        df,
        params_of(df),
        filename=str(tmp_path / "v.png"),
        variant_fields=["block"],
        variant_annotations=["triton"],
    )
    (ax,) = fig.axes
    assert legend_labels(ax) == ["torch", "triton (block=64)", "triton (block=128)"]
    # torch is not split, so its two block sizes share each x tick and are averaged.
    torch = df[df["Annotation"] == "torch"].groupby("n", sort=False)["AvgValue"].mean()
    line = ax.containers[0].lines[0]
    assert list(np.asarray(line.get_ydata())) == pytest.approx(list(torch))


def test_normalized_frame_gets_normalized_ylabel(tmp_path: Path) -> None:
    df = make_frame(normalized="torch")
    fig = plot_dataframe(df, ["n"], filename=str(tmp_path / "norm.png"))
    assert fig.axes[0].get_ylabel() == f"Normalized {TIME}"
    assert "relative to torch" in fig.get_suptitle()


def test_normalized_error_bars_use_the_relative_spread(tmp_path: Path) -> None:
    # A normalised frame whose StdDev stayed in raw units (ns) next to ratio-valued AvgValue.
    df = make_frame(annotations=("torch",), sizes=(1024,), normalized="torch")
    df["NormalizationValue"] = df["AvgValue"]
    df["AvgValue"] = 2.0
    df["StdDev"] = 500.0
    df["RelativeStdDevPct"] = 5.0
    fig = plot_dataframe(df, ["n"], filename=str(tmp_path / "norm.png"))
    container = fig.axes[0].containers[0]
    ((_, low), (_, high)) = container.lines[2][0].get_segments()[0]
    assert (low, high) == pytest.approx((1.9, 2.1))


def test_explicit_ylabel_wins(tmp_path: Path) -> None:
    fig = plot_dataframe(make_frame(), ["n"], filename=str(tmp_path / "y.png"), ylabel="Time")
    assert fig.axes[0].get_ylabel() == "Time"


def test_several_metrics_need_a_choice(tmp_path: Path) -> None:
    df = make_frame(metrics=(TIME, DRAM))
    with pytest.raises(ValueError, match="metrics found") as err:
        plot_dataframe(df, ["n"], filename=str(tmp_path / "m.png"))
    assert TIME in str(err.value) and DRAM in str(err.value)
    assert not (tmp_path / "m.png").exists()

    fig = plot_dataframe(df, ["n"], filename=str(tmp_path / "m.png"), metric=DRAM)
    assert fig.axes[0].get_ylabel() == f"{DRAM} (byte)"
    dram = df[(df["Metric"] == DRAM) & (df["Annotation"] == "torch")]["AvgValue"]
    assert list(fig.axes[0].containers[0].lines[0].get_ydata()) == pytest.approx(list(dram))


def test_unknown_metric_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'sm__nope' is not in the frame.*gpu__time_duration"):
        plot_dataframe(make_frame(), ["n"], filename=str(tmp_path / "m.png"), metric="sm__nope")


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"plot_type": "scatter"}, "plot_type must be one of"),
        ({"show_aggregate": "median"}, "show_aggregate must be"),
        ({"plot_width": 0}, "plot_width must be a positive"),
        ({"plot_height": True}, "plot_height must be a positive"),
        ({"row_panels": ["nope"]}, "'nope' is not a parameter"),
        ({"row_panels": "n"}, "must be a list of names"),
        ({"row_panels": ["n"], "x_keys": ["n"]}, "appears in both row_panels and x_keys"),
        ({"variant_annotations": ["torch"]}, "without variant_fields"),
        ({"variant_fields": ["n"], "variant_annotations": ["cutlass"]}, "not annotations"),
    ],
)
def test_bad_options_raise_value_error(
    tmp_path: Path, option: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        plot_dataframe(make_frame(), ["n"], filename=str(tmp_path / "bad.png"), **option)


def test_param_missing_from_frame_is_reported(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"lacks columns \['block'\]"):
        plot_dataframe(make_frame(), ["n", "block"], filename=str(tmp_path / "bad.png"))


def test_bar_plot_groups_bars_with_error_bars(tmp_path: Path) -> None:
    out = tmp_path / "bar.png"
    fig = plot_dataframe(make_frame(), ["n"], filename=str(out), plot_type="bar")
    assert_png(out)
    (ax,) = fig.axes
    assert len(ax.patches) == 6  # 2 annotations x 3 sizes
    lefts = sorted(round(p.get_x() + p.get_width() / 2, 3) for p in ax.patches)
    assert lefts == [-0.2, 0.2, 0.8, 1.2, 1.8, 2.2]
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert len(bars) == 2 and all(c.errorbar is not None for c in bars)
    assert legend_labels(ax) == ["torch", "triton"]


def test_show_aggregate_geomean_uses_the_geomean_column(tmp_path: Path) -> None:
    df = make_frame()
    df.loc[df["Annotation"] == "triton", "Geomean"] = 123456.0  # distinguishable from a recompute
    fig = plot_dataframe(df, ["n"], filename=str(tmp_path / "g.png"), show_aggregate="geomean")
    (ax,) = fig.axes
    assert tick_labels(ax)[-1] == "Geomean"
    texts = [t.get_text() for t in ax.texts]
    assert "123,456" in texts
    torch = df[df["Annotation"] == "torch"]["Geomean"].iloc[0]
    assert max(p.get_height() for p in ax.patches) == 123456.0
    assert any(math.isclose(p.get_height(), torch) for p in ax.patches)


def test_show_aggregate_geomean_is_recomputed_per_panel(tmp_path: Path) -> None:
    df = make_frame(blocks=(64, 128))
    fig = plot_dataframe(
        df,
        params_of(df),
        filename=str(tmp_path / "g.png"),
        col_panels=["block"],
        show_aggregate="geomean",
    )
    values = df[(df["block"] == 128) & (df["Annotation"] == "torch")]["AvgValue"]
    expected = float(np.exp(np.log(values).mean()))
    assert any(math.isclose(p.get_height(), expected) for p in fig.axes[1].patches)


def test_show_aggregate_avg(tmp_path: Path) -> None:
    df = make_frame()
    fig = plot_dataframe(df, ["n"], filename=str(tmp_path / "a.png"), show_aggregate="avg")
    (ax,) = fig.axes
    assert tick_labels(ax) == ["1024", "2048", "4096", "Avg"]
    mean = df[df["Annotation"] == "torch"]["AvgValue"].mean()
    assert ax.patches[0].get_height() == pytest.approx(mean)
    assert any(line.get_linestyle() == "--" for line in ax.get_lines())


def test_annotate_points_writes_each_value(tmp_path: Path) -> None:
    df = make_frame(sizes=(1024, 2048))
    plain = plot_dataframe(df, ["n"], filename=str(tmp_path / "p.png"))
    assert len(plain.axes[0].texts) == 0
    fig = plot_dataframe(df, ["n"], filename=str(tmp_path / "a.png"), annotate_points=True)
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["10.2", "20.5", "20.5", "41"]


def test_several_x_keys_join_into_one_tick_label(tmp_path: Path) -> None:
    df = make_frame(sizes=(1024, 2048), blocks=(64, 128))
    fig = plot_dataframe(df, params_of(df), filename=str(tmp_path / "x.png"), x_keys=["n", "block"])
    (ax,) = fig.axes
    assert tick_labels(ax) == ["1024, 64", "1024, 128", "2048, 64", "2048, 128"]
    assert ax.get_xlabel() == "n, block"


def test_x_keys_subset_merges_the_left_out_parameter(tmp_path: Path) -> None:
    df = make_frame(sizes=(1024,), blocks=(64, 128))
    fig = plot_dataframe(df, params_of(df), filename=str(tmp_path / "x.png"), x_keys=["block"])
    (ax,) = fig.axes
    assert tick_labels(ax) == ["64", "128"]
    assert len(ax.containers) == 2


def test_print_data_prints_the_plotted_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot_dataframe(make_frame(), ["n"], filename=str(tmp_path / "p.png"), print_data=True)
    out = capsys.readouterr().out
    assert f"Plotted data for {TIME}" in out
    assert "AvgValue" in out and "triton" in out and "4096" in out


def test_no_print_without_print_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot_dataframe(make_frame(), ["n"], filename=str(tmp_path / "p.png"))
    assert capsys.readouterr().out == ""


def test_plot_callback_runs_before_saving(tmp_path: Path) -> None:
    seen: list[Any] = []

    def paint_red(fig: Any) -> None:
        seen.append(fig)
        fig.patch.set_facecolor("red")

    out = tmp_path / "cb.png"
    fig = plot_dataframe(make_frame(), ["n"], filename=str(out), plot_callback=paint_red)
    assert seen == [fig]
    corner = matplotlib.image.imread(out)[0, 0]
    assert list(corner[:3]) == pytest.approx([1.0, 0.0, 0.0])


def test_leaves_pyplot_state_alone(tmp_path: Path) -> None:
    before = plt.get_fignums()
    fig = plot_dataframe(make_frame(), ["n"], filename=str(tmp_path / "p.png"))
    assert plt.get_fignums() == before
    # The returned figure stays usable after the call.
    fig.savefig(tmp_path / "again.png")
    assert_png(tmp_path / "again.png")
