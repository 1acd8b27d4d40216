"""The paper's alignment figure read as tokens (`python -m esp.bench --lens`): over a question set, per layer,
where the token that really came ranks in each mask's raw logit lens, for masks whose draft was accepted
against those whose draft was rejected (esp.decoding.lens; the Mask Lens of the app, pooled)."""
from __future__ import annotations

import statistics

from esp.trace import StepTrace

TOP = 5  # the "top-5 rate": the real token among the lens's best five at that layer


def lens_ranks(steps: list[StepTrace]) -> dict[str, list[list[int]]]:
    """Per resolved mask of a run, its real token's rank at every layer, accepted and rejected apart (the
    per-question record: ranks pool exactly, and a median needs them all)."""
    out: dict[str, list[list[int]]] = {"accepted": [], "rejected": []}
    for s in steps:
        for r in s.lens_real:
            out["accepted" if r.accepted else "rejected"].append(list(r.rank))
    return out


def pooled(rows: list[dict]) -> dict | None:
    """Per layer, over every question's masks: mean rank, median rank and top-5 rate of the real token, for
    accepted and rejected masks; None when no record holds both kinds."""
    groups = {k: [m for r in rows if r.get("lens") for m in r["lens"][k]] for k in ("accepted", "rejected")}
    if not all(groups.values()):
        return None
    out = {}
    for kind, masks in groups.items():
        layers = list(zip(*masks))
        out[kind] = {"n": len(masks),
                     "mean_rank": [sum(col) / len(col) for col in layers],
                     "median_rank": [statistics.median(col) for col in layers],
                     "top5_rate": [sum(x <= TOP for x in col) / len(col) for col in layers]}
    return out


def picked_layers(n: int) -> list[int]:
    """Layers a table shows: the embeddings, every eighth of the depth, and the output."""
    return sorted({round(i * (n - 1) / 8) for i in range(9)})


def table(results: dict) -> str:
    """Markdown: for each method with a pooled lens, the real token's median rank and top-5 rate per picked
    layer, accepted against rejected masks."""
    lines = []
    for method, r in results.items():
        lens = r.get("lens")
        if not lens:
            continue
        a, j = lens["accepted"], lens["rejected"]
        n = len(a["median_rank"])
        lines += [f"{method}: {a['n']} accepted and {j['n']} rejected masks; layer 0 = embeddings, {n - 1} = output",
                  "", "| layer | median rank, accepted | rejected | top-5 rate, accepted | rejected |",
                  "|---|---|---|---|---|"]
        for i in picked_layers(n):
            lines.append(f"| {i} | {a['median_rank'][i]:g} | {j['median_rank'][i]:g} | "
                         f"{a['top5_rate'][i]:.0%} | {j['top5_rate'][i]:.0%} |")
        lines.append("")
    return "\n".join(lines).strip()
