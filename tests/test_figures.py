"""Figures a reader can trust: no overlapping text, plain ticks, a legend wherever colour means something,
a colour per method, error bars only over several seeds."""

import numpy as np
import pandas as pd
import pytest

from trinity import plots
from trinity.plots import method_colours, plt, round_log_ticks, text_overlaps
from trinity.report import figures


def test_round_log_ticks():
    assert round_log_ticks(0.2, 2.4) == [0.2, 0.5, 1.0, 2.0]
    assert round_log_ticks(2.0, 22) == [2.0, 5.0, 10.0, 20.0]
    assert round_log_ticks(6.1, 9.3) == [7.0, 8.0, 9.0]
    assert round_log_ticks(20, 40) == [20.0, 30.0, 40.0]
    assert round_log_ticks(800, 2300) == [800.0, 1000.0, 2000.0]  # 900 would crowd 800 and 1000
    assert round_log_ticks(0.001, 1000) == [0.001, 0.1, 10.0, 1000.0]  # every other power of ten


def test_overlapping_text_is_found_and_a_clean_figure_passes():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    ax.set_title("a title")
    assert text_overlaps(fig) == []
    ax.text(0.5, 0.5, "here", transform=ax.transAxes)
    ax.text(0.5, 0.5, "here too", transform=ax.transAxes)
    assert text_overlaps(fig) == [("here", "here too")]
    crowded, ax = plt.subplots(figsize=(2, 2))
    ax.set_xticks(range(8), [f"a long label {i}" for i in range(8)])
    assert len(text_overlaps(crowded)) >= 7
    plt.close("all")


def test_eleven_methods_get_eleven_colours():
    names = [f"m{i}" for i in range(11)]
    assert len(set(method_colours(names).values())) == 11
    assert len(set(method_colours(names[:4]).values())) == 4


def _cases(seeds):
    return pd.DataFrame({"model": "g", "cluster": "p100x2", "method": ["m-etf", "trinity"], "fits": True,
                         "seeds": seeds, "step_time_ms_mean": [2.0, 1.0], "step_time_ms_std": [np.nan, 0.5]})


@pytest.mark.parametrize("seeds,bars_with_error", [([1, 1], 0), ([1, 3], 1)])
def test_error_bars_only_where_a_method_has_several_seeds(seeds, bars_with_error, tmp_path, monkeypatch):
    drawn = {}
    real_bar = plt.Axes.bar

    def bar(self, *args, yerr=None, **kwargs):
        drawn["yerr"] = yerr
        return real_bar(self, *args, yerr=yerr, **kwargs)

    monkeypatch.setattr(plt.Axes, "bar", bar)
    figures.plot_bars(_cases(seeds), "step_time_ms", "runtime (ms)", tmp_path / "bars.png", subtitle="x")
    errors = drawn["yerr"]
    assert (0 if errors is None else int(pd.Series(errors).notna().sum())) == bars_with_error


def test_titles_state_seeds_and_budget():
    cases = _cases([1, 3])
    search = pd.DataFrame({"method": ["m-etf", "trinity", "trinity"], "simulations": [np.nan, 800, 800]})
    assert figures.seeds_and_budget(cases, search) == "1 or 3 seeds per method; 800 simulator calls per search"
    assert figures.search_budget(search.iloc[:1]) == "no search budget recorded"


def test_the_gantt_chart_has_a_legend_for_its_colours(tmp_path, monkeypatch):
    gantt = pd.DataFrame({"device": ["d0", "d0", "d1"], "type": ["MatMul", "Add", "MatMul"],
                          "start_us": [0.0, 5.0, 0.0], "end_us": [5.0, 6.0, 4.0]})
    transfers = pd.DataFrame({"src": ["d0"], "start_us": [5.0], "end_us": [7.0]})
    seen = {}
    monkeypatch.setattr(plots, "_save", lambda fig, path: seen.update(
        legend=[t.get_text() for t in fig.axes[0].get_legend().get_texts()], overlaps=text_overlaps(fig)))
    plots.plot_gantt(gantt, tmp_path / "g.png", title="t", transfers=transfers)
    assert seen == {"legend": ["MatMul", "Add", "transfer (send rows)"], "overlaps": []}
