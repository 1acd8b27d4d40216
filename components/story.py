"""One real step of an ESP run told as a story, for a newcomer: five short phases, each lighting one view of the
player (the masks draft the tree, one forward reads the whole block, the verifier walks the tree, the kept path
joins the text and the cache, the masks move on), every number in it read from the trace
(tests/test_story.py holds each one against it). Plain text: the player sets it as text, never as markup."""
from __future__ import annotations

import re
from typing import Mapping, Sequence

from esp.trace import ESP, NodeTrace, StepTrace

from .common import accepted_nodes, as_steps, own_kind, show_ws, walk_end, BONUS
from .cost_view import step_width
from .eye_view import eye_pairs, rank_of, token_texts

# The player's views a phase may light (their keys in the player's markup: components/lecture.py).
VIEWS = ("tree", "mask", "eye", "text", "lens")
# What a learner can do once the story is told (the player's buttons; "prompt" only where a prompt box exists).
ACTIONS = {"play": "Play the whole run", "prompt": "Try your own prompt"}
CONTEXT_WORDS = 6  # the answer so far, as many of its last words


def word(text: str) -> str:
    """A token as a newcomer reads it: spaces around it trimmed (a token that is only whitespace shows it, as
    the tree does)."""
    return text.strip() or show_ws(text)


def quote(text: str) -> str:
    """The token's word between curly quotes."""
    return f"“{word(text)}”"


def percent(p: float) -> str:
    return f"{round(100 * p)}%"


def _esp_path(step: StepTrace) -> bool:
    """Every accepted draft of the step came from ESP's masks (older traces name no source)."""
    path = accepted_nodes(step)
    return bool(path) and all(n.sources in ([], [ESP]) for n in path)


def story_step(steps: Sequence[StepTrace | dict]) -> int | None:
    """The step to tell: of an ESP run, the one whose masks' drafts were accepted most (the earliest of
    equals), so that the story shows drafts kept; None for another method or when no draft was accepted."""
    steps = as_steps(steps)
    told = [s for s in steps if s.method == ESP and not s.prefill and "mask" in s.row_kinds and _esp_path(s)]
    if not told:
        return None
    return steps.index(max(told, key=lambda s: (len(s.accepted), -s.step)))


def lam(meta: Mapping) -> float | None:
    """The masks' EMA rate from the run's spec (`lam=0.1`), None when the spec does not say."""
    m = re.search(r"(?:^|:)lam=([0-9.]+)", str(meta.get("spec", "")))
    return float(m.group(1)) if m else None


def _so_far(steps: list[StepTrace], i: int) -> str:
    words = "".join(t for s in steps[:i] for t in s.emitted_text).split()
    return ("…" if len(words) > CONTEXT_WORDS else "") + " ".join(words[-CONTEXT_WORDS:])


def fed_level(step: StepTrace, depth: int) -> list[NodeTrace]:
    """The drafts fed at `depth` of the step's tree (pruned candidates were never fed), in draft order."""
    return [n for n in step.nodes if n.depth == depth and n.row is not None]


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _draft(steps: list[StepTrace], i: int) -> str:
    step = steps[i]
    first = fed_level(step, 1)
    best = max(first, key=lambda n: n.prob)
    k = step.row_kinds.count("mask") // sum(1 for n in step.nodes if n.row is not None)  # k after every fed node
    so_far = _so_far(steps, i)
    out = [f"The answer so far: “{so_far}”." if so_far else "",
           f"In the forward before, {k} mask tokens rode after the text, each guessing one more word ahead.",
           f"Mask 1's {len(first)} likeliest guesses form the tree's first level, {quote(best.text)} first "
           f"({percent(best.prob)} sure)."]
    for depth in range(2, len(step.shape) + 1):
        level = fed_level(step, depth)
        parents = {n.parent for n in level}
        if not level:
            continue
        if len(parents) == 1:
            under = step.nodes[parents.pop()].text
            out.append(f"Mask {depth}'s guesses {_and([quote(n.text) for n in level])} grow under {quote(under)}.")
        else:
            out.append(f"Mask {depth} adds {len(level)} guesses at level {depth}.")
    return " ".join(o for o in out if o)


def _forward(step: StepTrace) -> str:
    fed = sum(1 for n in step.nodes[1:] if n.row is not None)
    masks = step.row_kinds.count("mask")
    return (f"The last token {quote(step.nodes[0].text)}, the {fed} drafts and {masks} mask rows go through the "
            f"model together: {step_width(step)} rows in one forward. The attention pattern says who sees whom: "
            "each draft sees the text and its own branch, never its siblings, so every branch is read as if it "
            "were alone.")


def _greedy(meta: Mapping) -> bool:
    return not (meta.get("sampling") or {}).get("temperature")


def _walk(step: StepTrace, meta: Mapping) -> str:
    """The walk down the accepted path, each check with how sure the model was (greedy runs: the probability
    of its top choice, from the verifier's eye when the trace records it)."""
    greedy = _greedy(meta)
    seed = (meta.get("sampling") or {}).get("seed", 0)
    texts = token_texts(step)
    out = ["Then the model's own top choice at each position decides." if greedy else
           f"Then the model's own word at each position, sampled with seed {seed}, decides."]
    path = [step.nodes[0]] + accepted_nodes(step)
    for row, node in enumerate(path[1:]):
        rank, p = rank_of(node, eye_pairs(step, row))
        sure = f" ({percent(p)} sure)" if greedy and p is not None and rank == 1 else ""
        out.append(f"After {quote(path[row].text)} it wanted {quote(node.text)}{sure}: kept.")
    n = len(path) - 1
    if n >= len(step.emitted):
        return " ".join(out + ["The run ended there."])
    own = step.emitted_text[n]
    pairs = eye_pairs(step, n)
    sure = f" ({percent(pairs[0][1])} sure)" if greedy and pairs and texts.get(pairs[0][0]) == own else ""
    if own_kind(step) == BONUS:
        out.append(f"Nothing was drafted below {quote(path[-1].text)}, so the model's own next word, "
                   f"{quote(own)}{sure}, comes free as a bonus.")
    else:
        out.append(f"After {quote(path[-1].text)} it wanted {quote(own)}{sure}, which no draft had: the walk stops "
                   "and that word comes as the correction.")
    return " ".join(out)


def _join(step: StepTrace) -> str:
    n = len(step.emitted)
    words = _and([quote(t) for t in step.emitted_text])
    return (f"So one forward wrote {n} tokens, {words}, where plain decoding needs {n} forwards. Only the rows "
            f"of {quote(step.nodes[0].text)} and the kept drafts ({len(step.accepted_rows)} of {step_width(step)}) "
            "enter the model's memory, the KV cache; the other rows are dropped. The text is exactly what plain "
            "decoding writes.")


def _move_on(steps: list[StepTrace], i: int, meta: Mapping) -> str:
    step, rate = steps[i], lam(meta)
    nxt = f"step {step.step + 1}'s drafts" if i + 1 < len(steps) else "the next step's drafts"
    out = [f"The masks rode in this forward too, after {quote(walk_end(step).text)}: their guesses for the next "
           f"words are {nxt}, ready without an extra forward."]
    if rate is not None:
        out.append(f"Each new token pulls the masks {percent(rate)} of the way towards it (λ = {rate:g}).")
    tokens = sum(len(s.emitted) for s in steps)
    out.append(f"The whole run: {tokens} tokens in {len(steps)} forwards.")
    return " ".join(out)


def story(steps: Sequence[StepTrace | dict], meta: Mapping, step: int | None = None,
          actions: Sequence[str] = ("play",)) -> dict | None:
    """The story of step `step` (default story_step's) as {"step", "phases": [{"name", "text", "view"}],
    "actions": [{"id", "label"}]}: phase texts in plain words, each naming the view (VIEWS) it lights; the
    actions offered at its end. None when the run has no step to tell."""
    steps = as_steps(steps)
    i = story_step(steps) if step is None else step
    if i is None:
        return None
    s = steps[i]
    lens = any(x.lens for x in steps)
    phases = [("The masks draft", _draft(steps, i), "tree"),
              ("One forward reads the whole block", _forward(s), "mask"),
              ("The verifier walks the tree", _walk(s, meta), "eye" if s.eye else "tree"),
              ("The kept path joins the text", _join(s), "text"),
              ("The masks move on", _move_on(steps, i, meta), "lens" if lens else "tree")]
    return {"step": i, "phases": [{"name": n, "text": t, "view": v} for n, t, v in phases],
            "actions": [{"id": a, "label": ACTIONS[a]} for a in actions]}
