"""The paper's lesson from shipped bench results: tau of ESP and of each baseline per model size
(docs/results/model_size.json, written by `python -m esp.bench model-size`), and why ESP's margin grows with the model;
and the paper's ablations at the sizes measured here (esp.bench.paper, the results manifest's `paper` table)."""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import plotly.graph_objects as go

from esp.bench import paper

from . import palette
from .common import FAINT, INK, base_layout, figure, message_figure

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results" / "model_size.json"
TITLE = "Tokens per forward (τ) by model size"
# Each baseline in the colour of the source its drafts come from (components/palette.py: PLD copies like the
# lookup, STAND's n-gram table, LADE's pool; TR's template in neutral ink), and a dash of its own.
BASELINES = {"pld": palette.SOURCES["lookup"], "stand": palette.SOURCES["table"], "lade": palette.SOURCES["pool"],
             "tr": INK}
DASHES = {"pld": "dash", "stand": "dot", "lade": "dashdot", "tr": "longdash"}
ESP = "esp:k=1:bc=60"  # the ESP setting drawn: the best overall on both measured models (docs/BENCHMARKS.md)
WHY = ("Why the margin grows: ESP's drafts are the model's own guesses at later positions, so a model that "
       "already knows more of its future drafts better, while the baselines can only reuse text or next-token "
       "lists already seen, whatever the model knows.")


def load_sizes(path: str | Path = RESULTS) -> dict:
    """The results file, checked: runs with a label, a size and per method a tau. ValueError (one line)
    when the file is missing or not of that shape."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
        runs = data["runs"]
        for run in runs:
            str(run["label"]), float(run["params_m"])
            for r in run["results"].values():
                float(r["tau"])
    except FileNotFoundError:
        raise ValueError(f"No model-size results at {path.name}: run python -m esp.bench model-size.") from None
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        detail = f"no {e.args[0]!r} field" if isinstance(e, KeyError) else str(e).splitlines()[0][:100]
        raise ValueError(f"{path.name} is not a model-size results file ({detail}).") from None
    if not runs:
        raise ValueError(f"{path.name} holds no runs.")
    return data


def size_figure(path: str | Path = RESULTS, esp: str = ESP, height: int = 340) -> go.Figure:
    """τ per model (by size) for ESP and each baseline, ar's 1.0 as a floor; a message figure when the
    results file is missing or malformed."""
    try:
        data = load_sizes(path)
    except ValueError as e:
        return message_figure(TITLE, str(e), height)
    runs = sorted(data["runs"], key=lambda r: r["params_m"])
    labels = [f"{r['label']}" for r in runs]
    lines = [(m, m.upper(), color, 2) for m, color in BASELINES.items()]
    lines.append((esp, f"ESP ({_setting(esp)})", palette.SOURCES["esp"], 4))
    data_ = [{"type": "scatter", "x": labels, "y": [r["results"].get(m, {}).get("tau") for r in runs],
              "mode": "lines+markers", "name": name,
              "line": {"color": color, "width": width, "dash": DASHES.get(m, "solid")},
              "marker": {"size": 6 + 2 * width}, "connectgaps": False,
              "hovertemplate": f"{name} on %{{x}}: τ %{{y:.2f}}<extra></extra>"}
             for m, name, color, width in lines if any(m in r["results"] for r in runs)]
    floor = {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
             "line": {"color": FAINT, "dash": "dot", "width": 1}}
    layout = base_layout(TITLE, height, shapes=[floor],
                         xaxis={"type": "category", "title": {"text": "model (smallest first)", "font": {"size": 10}}},
                         yaxis={"title": {"text": "τ (tokens per forward)", "font": {"size": 10}}, "rangemode": "tozero"})
    return figure(data_, layout)


def size_sentences(path: str | Path = RESULTS, esp: str = ESP) -> str:
    """Per model, ESP's τ against the best baseline's; then why the margin grows (or the file's problem)."""
    try:
        data = load_sizes(path)
    except ValueError as e:
        return str(e)
    parts = []
    for run in sorted(data["runs"], key=lambda r: r["params_m"]):
        res = run["results"]
        base = {m: res[m]["tau"] for m in BASELINES if m in res}
        if esp not in res or not base:
            continue
        best = max(base, key=base.get)
        side = "above" if res[esp]["tau"] > base[best] else "below"
        parts.append(f"on {run['label']} ESP reaches τ {res[esp]['tau']:.2f}, {side} the best baseline "
                     f"({best.upper()} {base[best]:.2f})")
    if not parts:
        return f"The results file has no run with both {esp} and a baseline."
    run = data["runs"][0]
    protocol = (f"Spec-Bench dev, {run['questions']} questions, {run['max_new_tokens']} new tokens, greedy, "
                f"ESP with {_setting(esp)}")
    return f"{protocol}: {'; '.join(parts)}. {WHY}"


def _setting(spec: str) -> str:
    """'esp:k=1:bc=60' -> 'k=1, BC=60'."""
    return ", ".join(p.replace("bc=", "BC=") for p in spec.split(":")[1:]) or "defaults"


# ---------------------------------------------------------------- the paper's ablations (issue 50)

ABLATION_TITLE = "The paper's ablations: each arm's τ − the base arm's (95% CI over questions)"
MODEL_COLORS = (palette.OKABE_ITO["vermillion"], palette.SOURCES["esp"])


@lru_cache(maxsize=4)
def _paper(results: Path) -> list[tuple[str, dict, dict]]:
    return paper.shipped(results)


def ablation_figure(results: str | Path = RESULTS.parent, height: int = 520) -> go.Figure:
    """Per arm of the paper's ablation (the base arm left out), its τ difference from the base arm, paired by
    question, with its 95% interval, a marker per model; a message figure when the results are missing."""
    try:
        models = _paper(Path(results))
    except ValueError as e:
        return message_figure(ABLATION_TITLE, str(e), height)
    arms = [a for a in paper.ARMS if a.spec != paper.BASE]
    data = []
    for m, ((label, run, _), color) in enumerate(zip(models, MODEL_COLORS)):
        got = [(i, paper.paired_to_base(run, a.spec)[0]) for i, a in enumerate(arms) if a.spec in run["results"]]
        data.append({"type": "scatter", "mode": "markers", "name": label, "marker": {"color": color, "size": 8,
                     "symbol": ("circle", "diamond")[m % 2]},
                     "x": [p.mean for _, p in got], "y": [i + (0.18 if m else -0.18) for i, _ in got],
                     "error_x": {"type": "data", "symmetric": False, "color": color, "thickness": 1.5,
                                 "array": [p.hi - p.mean for _, p in got], "arrayminus": [p.mean - p.lo for _, p in got]},
                     "customdata": [[arms[i].label, p.word] for i, p in got],
                     "hovertemplate": f"{label}: %{{customdata[0]}}<br>τ − base %{{x:+.3f}} (%{{customdata[1]}})<extra></extra>"})
    zero = {"type": "line", "yref": "paper", "x0": 0, "x1": 0, "y0": 0, "y1": 1, "line": {"color": FAINT, "dash": "dot"}}
    layout = base_layout(ABLATION_TITLE, height, shapes=[zero],
                         xaxis={"title": {"text": "τ − base arm's τ", "font": {"size": 10}}, "zeroline": False},
                         yaxis={"tickvals": list(range(len(arms))), "ticktext": [a.label for a in arms],
                                "autorange": "reversed", "tickfont": {"size": 10}})
    return figure(data, layout)


def ablation_sentences(results: str | Path = RESULTS.parent) -> str:
    """Per model, which of the paper's claims hold and which do not (or why there is nothing to show)."""
    try:
        models = _paper(Path(results))
    except ValueError as e:
        return str(e)
    parts = []
    for label, run, lens in models:
        said = paper.claims(run, lens)
        held = [text for text, got in said if got and got[0]]
        not_held = [text for text, got in said if got and not got[0]]
        parts.append(f"On {label} these hold: {'; '.join(held) or 'none'}. These do not: {'; '.join(not_held) or 'none'}.")
    return (f"Base arm: {paper.BY_SPEC[paper.BASE].label.removeprefix('base: ')}. " + " ".join(parts)
            + " Every figure, the alignment figure and the measured reasons: docs/BENCHMARKS.md.")
