"""One step of a trace told in words: what was fed, what was drafted and by whom, what the model kept,
why the walk stopped, and what the step cost against a plain one. Wording follows the run's decoding mode."""
from __future__ import annotations

from collections import Counter
from typing import Mapping

from esp.trace import ACCEPTED, PRUNED, ROOT, NodeTrace, StepTrace

from . import sources as src
from .common import BONUS, CORRECTION, OWN, accepted_nodes, as_step, md_text, own_kind, show_ws, walk_end
from .cost_view import ratio, step_curve, step_width
from .mask_plot import prompt_length

# Plural names of block row kinds as the engine labels them (StepTrace.row_kinds).
ROW_KINDS = {"root": ("root", "root"), "node": ("draft node", "draft nodes"), "mask": ("mask row", "mask rows"),
             "lookahead": ("lookahead row", "lookahead rows")}
# At most this many rejected alternatives are named where the walk stopped.
MAX_NAMED = 3
# The model's own token of a step (components.common.own_kind), as vLLM and Leviathan et al. name it.
OWN_NAMES = {CORRECTION: "correction", BONUS: "bonus token"}
OWN_WHY = {CORRECTION: "the **correction**: the model's own token where a draft was rejected",
           BONUS: "the **bonus token**: every draft checked on the path was accepted, and the model's own next "
                  "token comes with them",
           OWN: "the model's own token, as plain decoding would emit it"}


def tok(text: str) -> str:
    """A token as inline code with its whitespace visible (a backtick would end the code span)."""
    return f"`{show_ws(text).replace('`', 'ˋ')}`"


def mode_words(meta: Mapping) -> tuple[str, str]:
    """(what the model's own token is called, how verification compares) for the run's decoding mode."""
    s = meta.get("sampling") or {}
    if not s.get("temperature"):
        return "the model's top choice", "equal to the model's top choice there"
    how = f"sampled with seed {s.get('seed', 0)} (temperature {s['temperature']:g}"
    how += f", top-p {s['top_p']:g})" if s.get("top_p", 1) < 1 else ")"
    return f"the model's token {how}", "equal to the token the model sampled there (same seed and position)"


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def rows_fed(step: StepTrace) -> str:
    """'30 rows: the root, 9 draft nodes and 20 mask rows' (kinds in the block's order)."""
    counts = Counter(step.row_kinds)
    parts = [("the root" if kind == "root" else
              _plural(n, *ROW_KINDS.get(kind, (f"{md_text(kind)} row", f"{md_text(kind)} rows"))))
             for kind, n in counts.items()]
    listed = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1] if parts else "nothing"
    return f"{_plural(step_width(step), 'row')} ({listed})"


def source_counts(nodes: list[NodeTrace]) -> str:
    """'7 by ESP mask, 2 by lookup + logit table' over the given draft nodes."""
    counts = Counter(tuple(n.sources) for n in nodes)
    return ", ".join(f"{n} by {src.describe(list(s))}" for s, n in counts.most_common())


def _drafts(step: StepTrace) -> str:
    drafts = [n for n in step.nodes if n.status != ROOT]
    if not drafts:
        return "No draft was proposed this step."
    fed = [n for n in drafts if n.status != PRUNED]
    pruned = len(drafts) - len(fed)
    # Pruned candidates carry no source (they were never kept as drafts), so sources count the fed ones.
    out = f"{_plural(len(drafts), 'draft')} proposed ({source_counts(fed) if fed else 'none fed'})"
    if pruned:
        out += f"; {pruned} pruned before feeding (a child equal to its parent, or over the budget), {len(fed)} fed"
    return out + "."


def _accepted(step: StepTrace) -> str:
    path = accepted_nodes(step)
    if not path:
        return "**Accepted: 0 drafts**." if len(step.nodes) > 1 else ""
    head = f"**Accepted: {_plural(len(step.accepted), 'draft')}**"
    if len({tuple(n.sources) for n in path}) == 1:  # one source for the whole path: say it once
        return f"{head}, from {src.describe(path[0].sources)}: {', '.join(tok(n.text) for n in path)}."
    return f"{head}: {', '.join(f'{tok(n.text)} ({src.describe(n.sources)})' for n in path)}."


def _stop(step: StepTrace, own: str) -> str:
    """Why the walk stopped: the drafts under the last accepted node, and the model's own token there, named
    as the field names it: a correction after a rejected draft, a bonus after every draft was accepted."""
    last = walk_end(step)
    rejected = [n for n in step.nodes if n.parent == last.index and n.status != ACCEPTED and n.row is not None]
    where = "the root" if last.status == ROOT else f"the last accepted draft {tok(last.text)}"
    n_acc = len(step.accepted)
    bonus = tok(step.emitted_text[n_acc]) if len(step.emitted_text) > n_acc else f"token {step.bonus}"
    kind = own_kind(step)
    name = OWN_NAMES.get(kind, "the model's own token")
    if rejected:
        names = ", ".join(tok(n.text) for n in rejected[:MAX_NAMED]) + (" …" if len(rejected) > MAX_NAMED else "")
        why = (f"The walk stopped after {where}: its first draft {tok(rejected[0].text)} "
               f"({src.describe(rejected[0].sources)}){_rank(rejected[0])} was not {own}, which was {bonus}")
        why += f" (drafts tried there: {names})." if len(rejected) > 1 else "."
    elif len(step.nodes) > 1:
        why = f"The walk stopped after {where}: nothing was drafted below it; {own} there was {bonus}."
    else:
        why = f"With no draft to check, {own} after {where} was {bonus}."
    if len(step.emitted) <= n_acc:
        return why + f" The run ended here (end of text or token limit), so that {name} was not emitted."
    return why + f" That is {OWN_WHY[kind]}: the step emitted {_plural(len(step.emitted), 'token')}."


def _rank(node: NodeTrace) -> str:
    """Where the verifier ranked a draft (recorded with the lens on), e.g. ', ranked 3rd by the model (p = 0.120)'."""
    if node.target_rank is None:
        return ""
    p = f" (p = {node.target_p:.3f})" if node.target_p is not None else ""
    return f", ranked {_ordinal(node.target_rank)} by the model{p},"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _cost(step: StepTrace, meta: Mapping) -> str:
    curve = step_curve(step, meta.get("curve"))
    if not curve or not curve.get("q"):
        return "No cost curve is stored with this run, so its cost against a plain step is unknown."
    width, r, emitted = step_width(step), ratio(curve, step_width(step)), len(step.emitted)
    verdict = "more than paid for itself" if emitted > r else "cost more than it saved"
    return (f"**Cost:** a forward of {width} rows took {r:.1f}× a plain one-row step on the recording machine; "
            f"it emitted {_plural(emitted, 'token')} where a plain step emits 1, so it {verdict}.")


def _prefill(step: StepTrace, own: str) -> str:
    masks = step.row_kinds.count("mask")
    out = [f"**Step 0 is the prefill.** One forward reads the prompt's {_plural(prompt_length(step) + 1, 'token')}; "
           f"its last token {tok(step.nodes[0].text)} is the root of a block of {rows_fed(step)}."]
    if masks:
        out.append("The mask tokens (the mean of the prompt's embeddings) sit at the positions after it; their "
                   "logits become the drafts that step 1 checks. Only the prompt enters the cache.")
    if len(step.nodes) > 1:
        out += [_drafts(step), _accepted(step), _stop(step, own)]
    else:
        first = tok(step.emitted_text[0]) if step.emitted_text else f"token {step.bonus}"
        out.append(f"{own[0].upper() + own[1:]} after the prompt is {first}, the first token of the answer.")
    return " ".join(o for o in out if o)


def step_words(step: StepTrace | dict, meta: Mapping) -> str:
    """A short Markdown paragraph telling what `step` did, in the words of the run's decoding mode."""
    step = as_step(step)
    own, check = mode_words(meta)
    if step.prefill:
        return _prefill(step, own)
    parts = [f"**Step {step.step}** fed {rows_fed(step)} in one forward, after {tok(step.nodes[0].text)}, "
             "the last token emitted.", _drafts(step)]
    if len(step.nodes) > 1:
        parts.append(f"Drafts are kept while each is {check}.")
    parts += [_accepted(step), _stop(step, own), _cost(step, meta)]
    return " ".join(p for p in parts if p)
