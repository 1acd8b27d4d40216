"""Where a tree spends its nodes and which of them are accepted: per record, every fed draft node counted by its
kind, the depth it sits at and whether it hangs off the main line (the chain of first-ranked children from the
root) or off a side branch. A static shape [K_1, ..., K_k] grows all its depth-2+ nodes under the main line; the
dynamic tree may open side branches where their cumulative probability is high (esp.decoding.tree)."""
from __future__ import annotations

from esp.trace import ACCEPTED, StepTrace

MAIN, SIDE = "main", "side"


def kinds(steps: list[StepTrace]) -> dict[str, list[int]]:
    """'<depth>:<main|side>' -> [nodes fed, nodes accepted] over a run's steps after the prefill (counts, so
    that questions pool exactly)."""
    out: dict[str, list[int]] = {}
    for s in steps:
        if s.prefill:
            continue
        first: dict[int, int] = {}  # parent -> its first-ranked fed child (children join in rank order)
        main = {0}
        for n in s.nodes[1:]:
            if n.row is None:
                continue
            if n.parent not in first:
                first[n.parent] = n.index
                if n.parent in main:
                    main.add(n.index)
            key = f"{n.depth}:{MAIN if n.parent in main else SIDE}"
            got = out.setdefault(key, [0, 0])
            got[0] += 1
            got[1] += n.status == ACCEPTED
    return dict(sorted(out.items()))


def pooled(records: list[dict]) -> dict[str, dict[str, float]]:
    """Per kind over records: nodes fed per drafting step and the share accepted (`kinds` of each record; its
    drafting steps from its speculative_decoding counts)."""
    steps = sum(r["speculative_decoding"]["num_spec_steps"] for r in records)
    total: dict[str, list[int]] = {}
    for r in records:
        for key, (fed, ok) in r.get("nodes", {}).items():
            got = total.setdefault(key, [0, 0])
            got[0] += fed
            got[1] += ok
    return {key: {"per_step": fed / steps if steps else 0.0, "accepted": ok / fed if fed else 0.0}
            for key, (fed, ok) in sorted(total.items())}
