"""The report as one HTML file: the data as JSON, the charts as Bokeh documents, BokehJS and
the page's own script and style inline, so that it opens offline from disk.

Bokeh is the optional extra ``advcli[report]``: its JavaScript (``bokeh.min.js``, 1.3 MB) ships
inside the Python package, and is the smallest of the plotting libraries that do (Plotly's
bundle is 4.8 MB), so the page loads and draws fastest with it.
"""

from __future__ import annotations

import importlib
import json
import re
from importlib import resources
from typing import Any

from advcli import installed, versions
from advcli.errors import DependencyError, file_list

CHART_HEIGHT = 230
BLUE, ORANGE, GREY = "#3b6fb6", "#d9822b", "#8a8f98"
PALETTE = (BLUE, ORANGE, "#4f9a5b", "#b0413e", "#7d5ba6", "#8c6d46", "#c75d9c", GREY,
           "#a3a82f", "#2fa3b0")  # fmt: skip
"""The sides' and lines' colours, in order (the page draws at most this many sides)."""


def bokeh() -> Any:
    """The bokeh package, or one line saying which extra to install."""
    try:
        module = importlib.import_module("bokeh")
    except ImportError:
        msg = f"advcli report draws its charts with Bokeh. Hint: {installed.pip_install('report')}"
        raise DependencyError(msg) from None
    versions.check_optional("bokeh", module.__version__, "report")
    return module


def heading(files: list[str]) -> str:
    """The page's heading and ``<title>``: its input files, many folded into their folder and
    count as messages fold them (400 step files would make a heading of 400 names)."""
    return f"advcli report: {file_list(files)}"


def render(payload: dict[str, Any], title: str) -> str:
    """The page for ``payload`` (what :func:`advcli.reports.collect.gather` gathers)."""
    bokeh()
    from bokeh.embed import json_item
    from bokeh.resources import Resources

    charts = {name: json_item(figure) for name, figure in figures(payload).items()}
    library = "\n".join(Resources(mode="inline", components=["bokeh"]).js_raw)
    here = resources.files("advcli.reports")
    page = (here / "page.html").read_text(encoding="utf-8")
    parts = {
        "TITLE": _html(title),
        "STYLE": (here / "page.css").read_text(encoding="utf-8"),
        "BOKEH": library,
        "DATA": _script_json({**payload, "charts": charts, "title": title}),
        "APP": (here / "page.js").read_text(encoding="utf-8"),
    }
    # one pass over the template: what a value holds ("@@APP@@" in a prompt) is never a slot
    return SLOT.sub(lambda slot: parts[slot.group(1)], page)


SLOT = re.compile(r"@@([A-Z]+)@@")


def figures(payload: dict[str, Any]) -> dict[str, Any]:
    """The Bokeh figures of the page, by the id of the element each is drawn in."""
    out: dict[str, Any] = {}
    dist = payload["distributions"]
    hists = {
        "chart-rewards": ("rewards (rollouts)", dist["rewards"], BLUE),
        "chart-advantages": (
            "advantages (action tokens)"
            if payload["overview"].get("action_tokens") is not None
            else "advantages (rollouts)",
            dist["advantages"],
            ORANGE,
        ),
        "chart-lengths": ("response length (action tokens)", dist["lengths"], GREY),
    }
    for i, (name, hist) in enumerate(dist["components"].items()):
        hists[f"chart-component-{i}"] = (f"reward component: {name}", hist, BLUE)
    for element, (title, hist, colour) in hists.items():
        if hist is not None:
            out[element] = _histogram(title, hist, colour)
    sizes = dist["group_sizes"]
    if sizes:
        out["chart-group-sizes"] = _bars("group sizes (groups)", sizes)
    if (compared := payload.get("compare")) is not None:
        names = compared["labels"]
        for key, title in (("rewards", "rewards (share of rollouts)"),
                           ("advantages", "advantages (share of rollouts; each one's mean over "
                            "its action tokens)")):  # fmt: skip
            if (hist := compared["distributions"][key]) is not None:
                out[f"chart-compare-{key}"] = _overlaid(title, hist, names)
    trend = payload["trends"]
    if trend is not None:
        lines = {
            "chart-trend-zero-variance": ("zero-variance share of rollouts", "zero_variance_share"),
            "chart-trend-reward": ("mean reward", "mean_reward"),
            "chart-trend-length": ("mean length (action tokens)", "mean_length"),
        }
        for element, (title, key) in lines.items():
            if key in trend:
                out[element] = _line(title, trend["step"], {key: trend[key]})
    health = payload.get("health_by_step")
    if health is not None:  # the run view: the audit's figures by step, in place of the trends'
        charts = dict(HEALTH_CHARTS)
        if health["success"] is not None:
            share = f"share of rollouts whose reward ≥ {health['success']:g}"
            charts["pass_rate"] = ("chart-trend-reward", f"pass rate ({share})")
        for key, (element, title) in charts.items():
            if key in health["series"]:
                out[element] = _line(title, health["step"], {key: health["series"][key]})
        quantiles = {
            f"{key[len('reward_q') :]}%": values
            for key, values in health["series"].items()
            if key.startswith("reward_q")
        }
        if quantiles:
            out["chart-trend-reward-quantiles"] = _line(
                "reward quantiles (10%, 25%, median, 75%, 90% of the step's rollouts)",
                health["step"],
                quantiles,
            )
    return out


HEALTH_CHARTS = {  # a figure of the run view: the chart's element, its title
    "zero_variance_rollout_share": ("chart-trend-zero-variance", "zero-variance share of rollouts"),
    "mean_reward": ("chart-trend-reward", "mean reward"),
    "mean_length": ("chart-trend-length", "mean length (action tokens)"),
    "truncated_share": ("chart-trend-truncated", "truncated share of rollouts"),
    "mean_lag": ("chart-trend-lag", "mean lag (step − version)"),
    "entropy_token_mean": ("chart-trend-entropy", "mean token entropy"),
    "abs_delta_mean": ("chart-trend-delta", "mean |δ| (trainer − sampler log-prob)"),
    "k3_mean": ("chart-trend-k3", "mean k3 (token)"),
    "masked_token_share": ("chart-trend-masked", "share of action tokens masked"),
}


def _figure(title: str, **kwargs: Any) -> Any:
    from bokeh.plotting import figure

    fig = figure(
        title=title,
        height=CHART_HEIGHT,
        sizing_mode="stretch_width",
        tools="pan,box_zoom,reset,save",
        toolbar_location="right",
        **kwargs,
    )
    fig.toolbar.logo = None
    for axis in (fig.xaxis, fig.yaxis):  # 6,000,000 and 0.0012, not 6.000e+6
        axis.formatter = plain()
    return fig


def plain() -> Any:
    """Numbers as they are: thousands separated, no exponent."""
    from bokeh.models import NumeralTickFormatter

    return NumeralTickFormatter(format="0,0.[000000]")


def _histogram(title: str, hist: dict[str, list[float]], colour: str) -> Any:
    from bokeh.models import ColumnDataSource, HoverTool

    edges, counts = hist["edges"], hist["counts"]
    source = ColumnDataSource(
        {"left": edges[:-1], "right": edges[1:], "count": counts, "top": counts}
    )
    fig = _figure(title)
    fig.quad(
        left="left", right="right", bottom=0, top="top", source=source,
        fill_color=colour, line_color="white",
    )  # fmt: skip
    fig.add_tools(HoverTool(tooltips=[("range", "[@left{0.[000]}, @right{0.[000]})"),
                                      ("count", "@count")]))  # fmt: skip
    fig.y_range.start = 0
    return fig


def _overlaid(title: str, hist: dict[str, Any], names: list[str]) -> Any:
    """The sides' histograms on the same bins, as shares of each side's count, overlaid."""
    from bokeh.models import ColumnDataSource, HoverTool

    edges = hist["edges"]
    fig = _figure(title)
    fig.yaxis.formatter = share()
    for name, counts, colour in zip(names, hist["counts"], PALETTE[: len(names)], strict=True):
        total = max(1, sum(counts))
        source = ColumnDataSource({"left": edges[:-1], "right": edges[1:], "count": counts,
                                   "share": [c / total for c in counts]})  # fmt: skip
        fig.quad(left="left", right="right", bottom=0, top="share", source=source,
                 fill_color=colour, fill_alpha=0.45, line_color=colour,
                 legend_label=name)  # fmt: skip
    tips = [
        ("range", "[@left{0.[000]}, @right{0.[000]})"),
        ("share", "@share{0.[0]%}"),
        ("count", "@count"),
    ]
    fig.add_tools(HoverTool(tooltips=tips))
    fig.y_range.start = 0
    fig.legend.location = "top_left"
    return fig


def share() -> Any:
    """Shares as percentages."""
    from bokeh.models import NumeralTickFormatter

    return NumeralTickFormatter(format="0.[0]%")


def _bars(title: str, counts: dict[str, int]) -> Any:
    from bokeh.models import ColumnDataSource, HoverTool

    names = list(counts)
    source = ColumnDataSource({"size": names, "groups": list(counts.values())})
    fig = _figure(title, x_range=names)
    fig.vbar(x="size", top="groups", width=0.8, source=source, fill_color=GREY, line_color=None)
    fig.add_tools(HoverTool(tooltips=[("size", "@size"), ("groups", "@groups")]))
    fig.y_range.start = 0
    return fig


def _line(title: str, steps: list[float], lines: dict[str, list[float | None]]) -> Any:
    """A figure per step, one line per entry of ``lines`` (a legend where several); a click
    on a point lists that step's groups (the page's ``advcliPickStep``)."""
    from bokeh.models import BasicTicker, ColumnDataSource, CustomJS, HoverTool, TapTool

    fig = _figure(title)
    pick = (
        "const i = source.selected.indices[0];"
        " if (i !== undefined) advcliPickStep(source.data.step[i]);"
    )
    for (name, values), colour in zip(lines.items(), PALETTE[: len(lines)], strict=True):
        source = ColumnDataSource(
            {"step": steps, "value": [float("nan") if v is None else v for v in values]}
        )
        legend = {"legend_label": name} if len(lines) > 1 else {}
        fig.line(x="step", y="value", source=source, line_color=colour, line_width=2, **legend)
        fig.scatter(x="step", y="value", source=source, color=colour, size=7)
        source.selected.js_on_change("indices", CustomJS(args={"source": source}, code=pick))
    fig.add_tools(HoverTool(tooltips=[("step", "@step"), ("value", "@value{0.[0000]}")]))
    fig.add_tools(TapTool())
    if len(lines) > 1:
        fig.legend.location = "top_left"
    fig.xaxis.axis_label = "step"
    fig.xaxis.ticker = BasicTicker(min_interval=1)  # steps are whole: no tick at 0.5
    return fig


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _script_json(obj: Any) -> str:
    """JSON for a ``<script type="application/json">`` element: ``<``, ``>`` and ``&`` as
    ``\\u`` escapes, so no text in it can close the element or open a comment."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
