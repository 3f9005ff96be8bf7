"""The shared plotting style: distinct series, labels that never collide, legends outside the
data, sample sizes said and small ones flagged, PNGs written atomically."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

from training.core.plots import (
    legend_outside,
    log_ticks,
    nice_log_ticks,
    pyplot,
    sample_label,
    save_figure,
    series_style,
    series_styles,
    thinned_ticks,
)


def test_any_two_of_the_first_ten_series_differ_in_colour_marker_and_dashes():
    styles = [series_style(n) for n in range(10)]
    for key in ("color", "marker", "linestyle"):
        assert len({str(s[key]) for s in styles[:6]}) == 6, key
    assert len({s["color"] for s in styles}) == 10 and len({s["marker"] for s in styles}) == 10
    assert series_styles(["a", "b", "a"]) == {"a": series_style(0), "b": series_style(1)}


def test_sample_sizes_are_said_and_small_ones_flagged():
    assert sample_label(2000) == "n = 2,000 rows"
    assert sample_label(36, "triples") == "n = 36 triples, small: ±0.08"
    assert sample_label(100) == "n = 100 rows"


def test_log_tick_labels_are_thinned_so_that_none_collide():
    # the paired fractions of a CoSAE run: 0.001 … 1, with 0.002 and 0.005 crowding 0.001
    fractions = [0.001, 0.002, 0.005, 0.01, 0.1, 1.0]
    kept = thinned_ticks(fractions)
    gaps = [math.log(b / a) / math.log(1.0 / 0.001) for a, b in itertools.pairwise(kept)]
    assert kept[0] == 0.001 and kept[-1] == 1.0 and min(gaps) >= 0.09
    assert thinned_ticks([4, 8, 16, 32, 64, 128]) == [4, 8, 16, 32, 64, 128]
    assert thinned_ticks([24, 25, 384]) == [24, 384]  # the last kept, its crowding neighbour not


def test_the_legend_lies_outside_every_panel_and_the_png_holds_it(tmp_path: Path):
    plt = pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(8, 3))
    styles = series_styles(["cedar", "pca", "topk-sae"])
    for axis in axes:
        for n, name in enumerate(styles):
            axis.plot(
                [4, 8, 16, 32], [1 / (k + n) for k in (4, 8, 16, 32)], label=name, **styles[name]
            )
        log_ticks(axis, "x", [4, 8, 16, 32], base=2)
    figure.tight_layout()
    legend = legend_outside(figure, list(axes))
    figure.canvas.draw()
    box = legend.get_window_extent()
    assert [t.get_text() for t in legend.get_texts()] == ["cedar", "pca", "topk-sae"]
    assert all(box.x0 >= axis.get_window_extent().x1 for axis in axes)
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["4", "8", "16", "32"]
    width = figure.get_size_inches()[0] * figure.dpi
    path = save_figure(figure, tmp_path / "sub" / "fig.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    png_width = int.from_bytes(data[16:20], "big")
    assert png_width > width * 120 / figure.dpi * 0.99  # cropped to the drawing, legend kept
    assert not list(path.parent.glob(".*tmp*"))


def test_round_log_ticks_bound_the_data_and_refine_for_a_narrow_range():
    assert nice_log_ticks([0.001, 1000]) == [0.001, 0.01, 0.1, 1.0, 10.0, 100.0, 1000.0]
    assert nice_log_ticks([0.12, 0.9]) == [0.1, 0.2, 0.5, 1.0]
    ratios = nice_log_ticks([0.87, 1.6])  # FVU ratios: 1-2-5 would give 0.5, 1, 2 only
    assert ratios[0] <= 0.87 and ratios[-1] >= 1.6 and len(ratios) >= 4 and 1.0 in ratios
    assert nice_log_ticks([]) == [] and nice_log_ticks([0.0, -1.0]) == []
