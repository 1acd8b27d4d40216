"""PLD (prompt lookup decoding): copy what followed an earlier occurrence of the text's last n-gram."""
from __future__ import annotations

import torch

from esp.errors import ESPError
from esp.decoding.tree import DraftTree
from esp.trace import LOOKUP
from esp.decoding.drafter import Context, Drafter, Proposal

RULES = ("pld", "hf")


def lookup(tokens: torch.Tensor, max_ngram: int, draft: int, rule: str = "pld") -> list[int]:
    """The draft after the left-most earlier match of the last n tokens, n = max_ngram .. 1.

    rule "pld" is the original prompt-lookup-decoding: the match must end before the suffix starts and
    be followed by a full `draft` tokens, else the next match (then a shorter n) is tried. Rule "hf" is
    transformers' PromptLookupCandidateGenerator: any match other than the suffix itself, with whatever
    continuation is there, up to `draft` tokens.
    """
    length = tokens.numel()
    for n in range(min(max_ngram, length - 1), 0, -1):
        hits = (tokens.unfold(0, n, 1) == tokens[-n:]).all(1).nonzero().flatten()
        start = hits + n
        if rule == "pld":
            ok = (start + draft <= length) & (start < length - n)
        else:
            ok = start < length
        start = start[ok]
        if start.numel():
            s = int(start[0])
            return tokens[s : s + draft].tolist()
    return []


class NgramIndex:
    """Where every n-gram (n = 1..max_ngram) of a growing text starts, kept as the text grows, so that a
    step's `lookup` costs the same at token 2000 as at token 20 (no search over the text).

    `find` gives what `lookup` gives: both of its rules take the left-most start that passes, and their
    tests only get harder further right, so the first start of the suffix's n-gram decides for each n."""

    def __init__(self, max_ngram: int):
        self.max_ngram = max_ngram
        self.starts: list[dict[tuple[int, ...], list[int]]] = [{} for _ in range(max_ngram + 1)]
        self.text: list[int] = []
        self.indexed = 0  # tokens of the text indexed so far

    def extend(self, tokens: list[int]) -> None:
        """Index the tokens of `tokens` past those indexed already (`tokens` extends the text so far; the
        engine's growing list itself may be passed every step)."""
        for end in range(self.indexed + 1, len(tokens) + 1):
            for n in range(1, min(self.max_ngram, end) + 1):
                self.starts[n].setdefault(tuple(tokens[end - n : end]), []).append(end - n)
        self.text, self.indexed = tokens, len(tokens)

    def find(self, draft: int, rule: str = "pld") -> list[int]:
        """`lookup(text, max_ngram, draft, rule)` of the indexed text."""
        text, length = self.text, len(self.text)
        for n in range(min(self.max_ngram, length - 1), 0, -1):
            hits = self.starts[n].get(tuple(text[length - n :]))
            start = hits[0] + n  # the suffix itself is always there
            ok = start + draft <= length and start < length - n if rule == "pld" else start < length
            if ok:
                return text[start : start + draft]
        return []

    def continuations(self, suffix: list[int], draft: int, limit: int, lo: int = 0) -> list[tuple[int, list[int]]]:
        """Up to `limit` (match length, next `draft` tokens) after occurrences in the indexed text of the last
        tokens of `suffix` (the indexed text itself, or other text such as the running prompt when this
        indexes earlier ones); only occurrences that start at `lo` or later (a window over the text's end).

        Longest matches first (up to max_ngram), the most recent occurrence first among equals; each
        position is reported once, with the longest suffix it matches. An occurrence with nothing after it
        (the suffix itself, in its own text) is none. The cost is max_ngram x `limit` lookups at any length."""
        text, size = self.text, len(self.text)
        found: list[tuple[int, list[int]]] = []
        seen: set[int] = set()
        for n in range(min(self.max_ngram, len(suffix)), 0, -1):
            for start in reversed(self.starts[n].get(tuple(suffix[len(suffix) - n :]), ())):
                if start < lo:  # starts are kept in order: every one left is older still
                    break
                s = start + n  # where the continuation starts; a longer match at s was reported above
                if s < size and s not in seen:
                    seen.add(s)
                    found.append((n, text[s : s + draft]))
                    if len(found) == limit:
                        return found
        return found


class PLDDrafter(Drafter):
    """Drafts a chain copied from the prompt or the output so far."""

    name = "pld"
    source = LOOKUP

    def __init__(self, n: int = 3, draft: int = 10, rule: str = "pld"):
        if not (isinstance(n, int) and n >= 1):
            raise ESPError(f"pld: n (max n-gram) must be an integer >= 1, not {n}.")
        if not (isinstance(draft, int) and draft >= 1):
            raise ESPError(f"pld: draft (tokens per draft) must be an integer >= 1, not {draft}.")
        if rule not in RULES:
            raise ESPError(f"pld: rule must be 'pld' (original) or 'hf' (transformers), not {rule!r}.")
        self.n, self.draft, self.rule = n, draft, rule

    def describe(self) -> str:
        return f"pld n={self.n} draft={self.draft}" + (" rule=hf" if self.rule == "hf" else "")

    def start(self, ctx: Context) -> None:
        self.index = NgramIndex(self.n)

    def propose(self, ctx: Context) -> Proposal:
        tree = DraftTree.root_only(ctx.tokens[-1])
        self.index.extend(ctx.tokens)
        chain = self.index.find(self.draft, self.rule)
        if chain:
            tree.add_chain(0, chain)
        return Proposal(tree=tree)
