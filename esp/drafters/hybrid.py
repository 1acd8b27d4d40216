"""The hybrid drafter: ESP's mask drafts, copies of earlier text and a table of the model's own past
distributions, merged into one calibrated tree whose width is chosen every step from measured cost.

- Sources. ESP: the paper's mask tokens unchanged (mean init, EMA with lambda, k masks), but fed only on
  the nodes where the accepted path may end and where they pay; their logits give the next step's
  candidates at depths 1..k. Lookup: continuations of earlier occurrences of the text's suffix (longest
  and most recent matches, over prompt and output; a hot drafter's earlier prompts are searched apart
  and scored apart). Table: the target's top distributions after every 1..4-token context, harvested
  from every fed node of every verify forward (the committed path and the rejected branches alike: each
  row is the model's true distribution after that text), weighted towards the latest.
- Merge. Candidates form one trie keyed by token path: a token proposed by several sources is one node,
  marked with all of them.
- Calibration. A candidate's conditional P(accept) comes from `Calibrator`, keyed by its sources, depth,
  each source's score band and its rank (a lookup candidate's also by whether the last step's accepted
  path ended on a lookup node: a copy that holds tends to hold on); a node's P is the product along its path. Labels are free:
  after the forward, the target's choice after every fed node is known, so every candidate child of
  every fed node (fed or not) is labelled.
- Budget. Best-first by P gives candidates whose every prefix is a valid tree; `budget.choose` picks how
  many to feed and where to put masks, maximising expected tokens per second under the measured curve
  (`bc=auto`) or expected tokens under a fixed cap (`bc=N`, which then fills its N rows).
- Back-off (`bc=auto`). `budget.Backoff` books every drafted step's measured time against plain steps and
  runs plain one-row steps (no tree is grown) while drafting does not pay, probing again after
  geometrically growing gaps; its docstring states the regret bound.
- Start (`start=cold|hot`). Cold (the default): every prompt starts from the model's calibration prior
  (`esp.budget.prior`: saved on this machine or shipped for the embedded model), an empty table, no earlier
  text to copy from and a fresh back-off, exactly as a drafter built for that prompt would. Hot: the
  table, the lookup history (earlier prompts and their outputs), the calibration and the back-off are
  kept across prompts by this drafter object (the official Token Recycling protocol, `tr:start=hot`).
  Either way the cost curve is this drafter's own copy of the machine's prior (`esp.budget.cost`: stored by
  `esp.calibrate`, else a default shape), learned from its own forwards, never timed inside a call; and
  nothing a drafter learns reaches another drafter.
Every choice is deterministic given the text and the measured times; nothing is sampled but the
target's own tokens, so runs repeat exactly (widths under `bc=auto` follow the measured times).
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np
import torch

from esp.budget.width import Backoff, BatchWidth, Choice, best_rate, by_rows, choose
from esp.budget.calibrate import Calibrator, bucket
from esp.budget.cost import CostCurve, curve_for
from esp.device import read_all
from esp.errors import ESPError
from esp.budget.prior import Prior, prior_for
from esp.sampling import draw, top_k
from esp.sampling import probs as target_probs
from esp.trace import ESP, LOOKUP, SOURCES, TABLE
from esp.decoding.tree import DraftTree
from esp.decoding.drafter import Context, Drafter, Notes, Proposal, StepResult
from esp.drafters.esp import INITS, MaskEmbedding
from esp.drafters.pld import NgramIndex
from esp.drafters.stand import NGramTable

AUTO = "auto"
AUTO_CAP = 64  # widest block bc=auto considers (a CPU never gets there; a GPU rarely needs more)
GROW_FLOOR = 0.01  # under bc=auto, candidates less likely than this are not worth a row anywhere
ESP_FIRST = 32  # ESP candidates ranked at depth 1 (the mask distribution covers the whole vocabulary)
TOP = 6  # tokens kept per table context and deeper ESP level: 10 drafted no better at bc=60 (tau 2.25 vs 2.27), 4 worse (2.16)
RANKS = 3  # a source's ranks from 3 on share one calibration key
PLAIN_MARGIN = 0.1  # under bc=auto a draft must beat a plain one-row step by this share: P runs optimistic
PROBE_EVERY = 8  # steps without ESP drafts after which masks are fed anyway, to keep measuring their value,
PROBE_LOSS = 0.1  # if that step's expected tokens per second drop by at most this share
STARTS = ("cold", "hot")
PRIORS = ("auto", "none")  # the model's saved or shipped calibration prior, or a flat start
MEMORY = 2  # each new observation of a table context weighs 1/2 (tau at bc=60, 26 dev questions, hot / cold: a
# running mean 2.13 / 2.21, this 2.48 / 2.36; the other weights tried are in docs/BENCHMARKS.md)
HISTORY_MATCHES = 2  # a hot drafter's copies from earlier prompts, besides the running prompt's 4
HISTORY = 8192  # tokens of earlier prompts and outputs a hot drafter's lookup searches
MASK_START = [1.0, 4.0]  # a mask's value before any evidence: [tokens owed, steps]
RELIABILITY_START = [4.0, 4.0]


@dataclass(slots=True)
class Candidate:
    """A proposed child: its token, what each source said about it, and its calibrated P(accept | parent)."""

    token: int
    sources: tuple[str, ...]
    keys: tuple
    cond: float


class HybridDrafter(Drafter):
    """One calibrated, cost-budgeted tree from any subset of ESP masks, lookup and the logit table."""

    backoff: Backoff | None = None  # bc=auto: made at a cold prompt (or a hot drafter's first), then kept
    guard: Backoff | None = None  # the back-off this prompt books its steps with (none in a batch)

    def __init__(self, bc: int | str = AUTO, k: int = 1, lam: float = 0.1, init: str = "mean",
                 sources: tuple[str, ...] = (ESP, LOOKUP, TABLE), top: int = TOP, n: int = 4,
                 match: int = 8, draft: int = 32, name: str = "hybrid", curve: CostCurve | None = None,
                 start: str = "cold", prior: str = "auto"):
        if not (bc == AUTO or (isinstance(bc, int) and bc >= 1)):
            raise ESPError(f"{name}: BC must be 'auto' or a positive integer, not {bc!r}.")
        if not set(sources) <= {ESP, LOOKUP, TABLE} or not sources:
            raise ESPError(f"{name}: sources must be some of esp, lookup, table, not {sources!r}.")
        if ESP in sources and not (isinstance(k, int) and 1 <= k <= 4):
            raise ESPError(f"{name}: k (mask tokens) must be an integer from 1 to 4, not {k}.")
        if not 0 <= lam <= 1:
            raise ESPError(f"{name}: lambda (EMA rate) must be in [0, 1], not {lam}.")
        if init not in INITS:
            raise ESPError(f"{name}: mask init must be one of {', '.join(INITS)}, not {init!r}.")
        if start not in STARTS:
            raise ESPError(f"{name}: start must be cold (each prompt from the prior) or hot (learning kept across prompts), not {start!r}.")
        if prior not in PRIORS:
            raise ESPError(f"{name}: prior must be auto (the model's calibration prior, if any) or none, not {prior!r}.")
        for what, v in (("top", top), ("n", n), ("match", match), ("draft", draft)):
            if not (isinstance(v, int) and v >= 1):
                raise ESPError(f"{name}: {what} must be a positive integer, not {v!r}.")
        self.name, self.bc, self.sources = name, bc, tuple(s for s in SOURCES if s in sources)
        self.k = k if ESP in sources else 0
        self.top, self.n, self.match, self.draft = top, n, match, draft
        self.cap = AUTO_CAP if bc == AUTO else bc
        self.curve: CostCurve | None = None if curve is None else curve.copy()  # this drafter's own
        self.mask = MaskEmbedding(k, lam, init) if self.k else None
        self.start_mode, self.prior_mode = start, prior
        self.initial: Prior | None = None  # the prior this drafter starts every cold prompt from (read at the first)
        self._learn(Prior())
        self.text: list[int] = []  # the running prompt's tokens (prompt + output), for a hot drafter's history
        self.buf: torch.Tensor | None = None  # the target's distributions over a block, reused step to step

    @property
    def source(self) -> str | None:
        return self.sources[0] if len(self.sources) == 1 else None

    @property
    def times_forward(self) -> bool:
        """bc=auto learns the cost curve from each forward's measured time (see Drafter.times_forward)."""
        return self.bc == AUTO

    def describe(self) -> str:
        lam = f" lam={self.mask.lam}" if self.mask else ""
        hot = " start=hot" if self.start_mode == "hot" else ""
        return f"{self.name} bc={self.bc} sources={'+'.join(self.sources)}" + (f" k={self.k}{lam}" if self.k else "") + hot

    def _learn(self, prior: Prior) -> None:
        """Start the learned state from `prior` (a copy this drafter owns): calibration, mask values,
        reliability; an empty table and history, and a back-off made afresh at the next prompt."""
        key = "+".join(self.sources)
        self.calibrator = Calibrator()
        self.calibrator.counts = prior.counts
        masks = prior.mask_value.get(key, [])
        # per mask j: tokens owed to its drafts, [sum, steps]
        self.mask_value = [list(masks[j]) if j < len(masks) else list(MASK_START) for j in range(self.k)]
        self.reliability = list(prior.reliability.get(key, RELIABILITY_START))  # accepted drafts vs their sum of P
        self.table = NGramTable(self.n, self.top, MEMORY)
        self.history = np.zeros(0, dtype=np.int64)  # earlier prompts and outputs, searched by a hot drafter's lookup
        self.backoff = None

    def learned(self) -> Prior:
        """What this drafter has learned so far, as a prior (a copy: `esp.budget.prior.save` writes it)."""
        key = "+".join(self.sources)
        return Prior(self.calibrator.counts, {key: self.mask_value}, {key: self.reliability}).copy()

    # ------------------------------------------------------------------ per prompt

    def start(self, ctx: Context) -> None:
        if self.curve is None:  # the machine's prior, never timed here: the steps' own forwards correct it
            self.curve = curve_for(ctx.lm)
        if self.initial is None:
            self.initial = (prior_for(ctx.lm) if self.prior_mode == "auto" else None) or Prior()
            self._learn(self.initial.copy())
        elif self.start_mode == "cold":
            self._learn(self.initial.copy())
        else:
            self.history = np.concatenate([self.history, np.asarray(self.text, dtype=np.int64)])[-HISTORY:]
        self.text = ctx.tokens  # the engine extends this list as the prompt's output grows
        if LOOKUP in self.sources:  # n-gram indexes, so that a step's lookup costs the same at any length
            self.index = NgramIndex(self.match)
            self.history_index = None
            if self.history.size:
                self.history_index = NgramIndex(self.match)
                self.history_index.extend(self.history.tolist())
        self.guard = None  # this prompt's back-off: in a batch, the batch budget backs off for all rows
        if self.bc == AUTO and not ctx.batched:
            if self.backoff is None:
                self.backoff = Backoff()
            self.guard = self.backoff
            self.guard.start()
        if TABLE in self.sources:
            self.table.seed(ctx.tokens)
        if self.mask:
            self.mask.start(ctx)
        self.esp_top: list[list[tuple[int, int, int]]] | None = None  # per depth: ESP's (token, band, rank)
        self.cands: dict[int, list[Candidate]] = {}
        self.drafted: tuple[int, DraftTree, np.ndarray] | None = None  # (step, tree, P) grown this step
        self.resting = False
        self.choice = None
        self.since_esp = 0  # steps since ESP drafts were last available
        self.live = False  # the last step's accepted path ended on a lookup node: its copy still holds

    # ------------------------------------------------------------------ drafting

    def batch_planner(self) -> BatchWidth | None:
        """bc=auto in a batch: one width for all rows, from every row's offer (see `offer`)."""
        return BatchWidth(PLAIN_MARGIN) if self.bc == AUTO else None

    def offer(self, ctx: Context) -> np.ndarray:
        """This step's candidates, grown now, as the most expected tokens a block of at most r rows would
        give, r = 0..cap (a batch budget picks one width for all rows from these; `propose` then reuses them)."""
        tree, p = self._draft(ctx)
        best = by_rows(p, tree.parents[1:], self.k, self._mask_value(self.k), self.cap)
        for j in range(min(self.k, 1), self.k):  # fewer masks per node compete with k, as in `propose`
            best = np.maximum(best, by_rows(p, tree.parents[1:], j, self._mask_value(j), self.cap))
        return best

    def propose(self, ctx: Context, rows: int | None = None) -> Proposal:
        """The step's block: its width chosen here (bc=auto: by measured cost; bc=N: N rows), or at most
        `rows` rows when a batch budget chose the width."""
        self.t0 = self.clock()
        drafted = self.drafted if self.drafted is not None and self.drafted[0] == ctx.step else None
        self.resting = rows == 1 and drafted is None  # a batch that drafts nothing this step: learn nothing either
        if self.resting or (rows is None and self.guard is not None and not self.guard.drafting and ctx.step > 0):
            # Backed off: a plain step, with none of the drafting's Python.
            self.cands, self.path_of, self.gain, self.esp_top = {}, {0: ()}, 1.0, None
            self.choice = Choice(0, (), 1, 1.0, self.curve.predict(1))
            return Proposal(DraftTree([ctx.tokens[-1]], [-1], [1.0], [1.0], sources=[()], p=[1.0]))
        tree, p = drafted[1:] if drafted is not None else self._draft(ctx)
        cap = self.cap if rows is None else rows
        cost = None if self.bc != AUTO or rows is not None else self.curve.table(self.cap, explore=True)
        # Fewer masks per node compete with k: mask j's drafts are worth what they have added so far.
        c = max((choose(p, tree.parents[1:], j, self._mask_value(j), cap, cost, margin=PLAIN_MARGIN)
                 for j in range(min(self.k, 1), self.k + 1)), key=Choice.score)
        value = self._mask_value(self.k)
        if self.k and not c.masked and cap > self.k and (ctx.step == 0 or self.since_esp >= PROBE_EVERY):
            # Feed masks anyway now and then, so their value keeps being measured, if that costs little
            # (the prefill feeds the whole prompt, so its mask rows cost next to nothing).
            floor = None if ctx.step == 0 or cost is None else (1 - PROBE_LOSS) * c.expected / c.seconds
            if floor is None or best_rate(p, value, cost, 1 + self.k) >= floor:
                probe = choose(p, tree.parents[1:], self.k, value, cap, cost, force_mask=True)
                if floor is None or probe.expected / probe.seconds >= floor:
                    c = probe
        self.choice = c
        fed = DraftTree(tree.tokens[: c.n + 1], tree.parents[: c.n + 1], tree.probs[: c.n + 1],
                        tree.cum_probs[: c.n + 1], sources=tree.sources[: c.n + 1], p=tree.p[: c.n + 1])
        embeds = self.mask.embeds(ctx.lm.dtype)[: c.k] if self.mask else None
        # Masks sit on at most a few nodes: their head rows ride along in the nodes' head call.
        return Proposal(fed, k=c.k, mask_embeds=embeds, masked=c.masked, head_all=True)

    def _draft(self, ctx: Context) -> tuple[DraftTree, np.ndarray]:
        """Grow this step's candidates; with their path probabilities scaled by the drafter's reliability."""
        self.known: dict[tuple, tuple] = {}  # what proposed a candidate -> its calibration, for this step
        tree, self.cands = self._grow(ctx)
        self.gain = gain = self.reliability[0] / self.reliability[1]
        p = np.minimum(np.asarray(tree.cum_probs[1:], dtype=np.float64) * gain, 1.0)  # host numbers: numpy
        self.drafted = (ctx.step, tree, p)
        return tree, p

    def _grow(self, ctx: Context) -> tuple[DraftTree, dict[int, list[Candidate]]]:
        """Best-first by P over the merged candidates, up to the cap (bc=auto: while P can still pay)."""
        root = ctx.tokens[-1]
        tree = DraftTree([root], [-1], [1.0], [1.0], sources=[()], p=[1.0])
        paths: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        if LOOKUP in self.sources:
            self.index.extend(ctx.tokens)
            found = self.index.continuations(ctx.tokens, self.draft, 4)
            if self.history_index is not None:
                # Copies from other text get a score of their own (-n): a match into an earlier prompt
                # (the same chat template, say) predicts less than one into this prompt.
                found += [(-n, c) for n, c in self.history_index.continuations(ctx.tokens, self.draft, HISTORY_MATCHES)]
            for n, cont in found:
                for d, tok in enumerate(cont):
                    paths.setdefault(tuple(cont[:d]), []).append((tok, n))
        cands: dict[int, list[Candidate]] = {}
        path_of = {0: ()}
        frontier: list[tuple[float, int, int]] = []

        def open_node(v: int) -> None:
            cands[v] = cs = self._children(ctx.tokens, path_of[v], tree.tokens[v], paths)
            if cs:
                heapq.heappush(frontier, (-tree.cum_probs[v] * cs[0].cond, v, 0))

        open_node(0)
        floor = GROW_FLOOR if self.bc == AUTO else 0.0
        while frontier and len(tree) < self.cap:
            neg, v, rank = heapq.heappop(frontier)
            if -neg < floor:
                break
            cs = cands[v]
            if rank + 1 < len(cs):
                heapq.heappush(frontier, (-tree.cum_probs[v] * cs[rank + 1].cond, v, rank + 1))
            c = cs[rank]
            node = tree.add(v, c.token, c.cond)
            tree.sources.append(c.sources)
            tree.p.append(tree.cum_probs[node])
            path_of[node] = path_of[v] + (c.token,)
            open_node(node)
        self.path_of = path_of  # the fed tree is a prefix of this one: _harvest reads its paths here
        return tree, cands

    def _children(self, text: list[int], path: tuple[int, ...], parent: int,
                  paths: dict[tuple[int, ...], list[tuple[int, int]]]) -> list[Candidate]:
        """Every source's proposals after text + path, merged per token and calibrated, best first."""
        depth = len(path) + 1
        said: dict[int, dict[str, tuple]] = {}  # token -> source -> (score, rank)
        if TABLE in self.sources:
            order, toks, probs = self.table.match((text[-self.n :] + list(path))[-self.n :])
            for r, (t, q) in enumerate(zip(toks, probs)):
                said[t] = {TABLE: ((order, bucket(q)), min(r, RANKS))}
        if self.esp_top is not None and depth <= len(self.esp_top):
            for t, band, r in self.esp_top[depth - 1]:
                by = said.get(t)
                if by is not None:
                    by[ESP] = (band, r)
                elif t != parent:  # ESP's rule: a mask rarely means "repeat the parent"
                    said[t] = {ESP: (band, r)}
        for t, n in paths.get(path, ()):  # best match first: this prompt's longest, then earlier text's
            by = said.setdefault(t, {})
            if LOOKUP not in by:
                by[LOOKUP] = (n, 0)
        out = []
        d, known = min(depth, 6), self.known
        for t, by in said.items():
            what = (d, tuple(by.items()))
            got = known.get(what)
            if got is None:
                known[what] = got = self._calibrated(by, d)
            out.append(Candidate(t, *got))
        out.sort(key=lambda c: -c.cond)
        return out

    def _calibrated(self, by: dict[str, tuple], d: int) -> tuple[tuple[str, ...], tuple, float]:
        """Sources, calibration keys and P(accept | parent) of a candidate that `by` sources proposed at depth d."""
        if len(by) == 1:
            ((src, (score, rank)),) = by.items()
            srcs, scores = (src,), (score,)
        else:
            srcs = tuple(s for s in SOURCES if s in by)
            scores = tuple(by[s][0] for s in srcs)
            rank = min(v[1] for v in by.values())
        # Score before depth: a 6-token copy match predicts acceptance at every depth of its chain.
        keys = ((srcs,), (srcs, scores), (srcs, scores, d), (srcs, scores, d, rank))
        if LOOKUP in srcs:
            # Chain-aware: a copy whose drafts were accepted up to the last step's end tends to hold on, which
            # a product of pooled conditionals misses. Every lookup node's ancestors are the same copy's (lookup
            # proposals are keyed by their whole path), so the chain's parent that varies is the root's: the
            # last accepted node. Finest level: the prior's coarser keys stay usable.
            keys += ((srcs, scores, d, rank, self.live),)
        return srcs, keys, self.calibrator.p(keys)

    def _mask_value(self, k: int) -> float:
        """Expected tokens that k masks on the node where the path ends add to the next step."""
        return sum(total / steps for total, steps in self.mask_value[:k])

    # ------------------------------------------------------------------ learning

    def observe(self, ctx: Context, res: StepResult) -> Notes:
        if self.resting:
            return self._rest(ctx, res)
        tree, s, lm = res.proposal.tree, ctx.sampling, ctx.lm
        logits = res.node_logits
        # Everything the step's learning needs from the device is read back at once (one sync): the
        # target's top tokens and probabilities after every fed node, ESP's candidates from the masks at
        # the end of the accepted path, and the mask state for the trace.
        parts = []
        if TABLE in self.sources:
            parts += self._top(logits, s)
        elif s.greedy:
            parts.append(logits.argmax(-1))
        mask_rows = res.layout.mask_rows(res.path[-1]) if self.mask else []
        if mask_rows:
            dists = torch.softmax(res.logits(mask_rows, lm), dim=-1)  # from the step's one head call (head_all)
            # Depth 1 is opened once (at the root), so it can afford a longer list than deeper levels.
            esp_p, esp_t = torch.topk(dists, min(ESP_FIRST, dists.shape[-1]), dim=-1)
            parts += [esp_t, esp_p]
        if self.mask:
            self.mask.update(lm, res.emitted)
            parts.append(self.mask.summary())
        got = read_all(parts)
        if TABLE in self.sources:
            top_t, top_p = [[int(x) for x in row] for row in got[0]], got[1]
            got = got[2:]
        else:
            top_t = None
            if s.greedy:
                top_t, got = [[int(x)] for x in got[0]], got[1:]
        if not s.greedy:
            depths = tree.depths
            targets = [draw(logits[v], res.root_pos + depths[v] + 1, s) for v in range(len(tree))]
        else:  # a row's top token is its argmax (up to exact ties, which only blur a label)
            targets = [row[0] for row in top_t]
        # Free labels: the target's choice after every fed node labels every candidate child of that node,
        # fed or not. Children of rejected nodes count too: they rank candidates better (measured: tau 2.05
        # against 1.78 at bc=60 on six development questions), though they make P a little optimistic
        # for deep paths, which `reliability` corrects in sum.
        tally: dict[tuple, list[int]] = {}  # a step labels the same keys many times: count, then update once
        for v, want in enumerate(targets):
            for c in self.cands.get(v, ()):
                t = tally.get(c.keys)
                if t is None:
                    tally[c.keys] = t = [0, 0]
                t[0] += c.token == want
                t[1] += 1
        for keys, (accepted, seen) in tally.items():
            self.calibrator.update(keys, accepted, seen)
        # The fed tree may be a cut of the proposal (esp.bench.whatif feeds the root alone at a resumed prefill).
        self.reliability[0] += len(res.path) - 1
        self.reliability[1] += sum((tree.p or [1.0])[1:])
        best = self.cands.get(0)
        if len(tree) == 1 and best:
            # A step that fed no node still labels the root's best candidate: booked as if fed, so that a
            # reliability driven down by a few bad early steps can recover. Otherwise it is absorbing: a low
            # reliability scales every P below what a row costs, nothing is fed, and nothing moves it again
            # (what locked `hybrid:bc=auto:sources=esp` out for whole runs; docs/BENCHMARKS.md).
            self.reliability[0] += best[0].token == targets[0]
            self.reliability[1] += best[0].cond
        if TABLE in self.sources:
            self._harvest(ctx, res, top_t, top_p)
        self.live = len(res.path) > 1 and bool(tree.sources) and LOOKUP in tree.sources[res.path[-1]]
        if self.esp_top is not None and tree.sources:
            # What ESP added: without its first ESP-only node on the accepted path, the path would have
            # stopped there (that token becoming the bonus), so every token accepted from it on is owed to
            # the mask that drafted its depth.
            path = res.path[1:]
            first = next((d for d, v in enumerate(path) if tree.sources[v] == (ESP,)), None)
            for d, book in enumerate(self.mask_value[: len(self.esp_top)]):
                book[0] += len(path) - d if d == first else 0
                book[1] += 1
        notes = Notes()
        self.esp_top = None
        if self.mask:
            self.since_esp = 0 if mask_rows else self.since_esp + 1
            if mask_rows:
                keep = [ESP_FIRST] + [self.top] * (len(mask_rows) - 1)
                self.esp_top = [[(int(tok), bucket(q), min(r, RANKS)) for r, (tok, q) in enumerate(zip(tt[:n], pp[:n]))]
                                for tt, pp, n in zip(got[0], got[1], keep)]
                got = got[2:]
            notes.ema = MaskEmbedding.named(got[0])
        c, rows, guard = self.choice, res.layout.size, self.guard
        mode = "draft" if guard is None or guard.drafting or ctx.step == 0 else "plain"
        if ctx.step > 0:  # the prefill's forward also holds the prompt: not a point on the curve nor a step to book
            if guard is not None:
                secs = self.step_seconds(res)  # until a plain step is timed, the curve's shape says what one costs
                guard.observe(rows, len(res.emitted), secs, secs * self.curve.predict(1) / self.curve.predict(rows))
        for r, secs in res.timed:  # forwards timed by now (prefills never are)
            self.curve.observe(r, secs)
        notes.cost = {"budget": self.bc, "rows": rows, "cap": self.cap, "mode": mode,
                      "expected_tokens": round(c.expected, 4), "reliability": round(self.gain, 4), "predicted_s": self.curve.predict(rows),
                      "measured_s": res.timed[-1][1] if res.timed else res.forward_s, "curve": self.curve.to_dict(), "drift": round(self.curve.drift, 4),
                      "backoff": guard.state() if guard is not None else None}
        return notes

    def _rest(self, ctx: Context, res: StepResult) -> Notes:
        """A plain step of a batch that drafts nothing for now (its budget backed off): only what later steps
        need, the masks' EMA and the forward's time, so that the batch runs at plain decoding's cost."""
        if self.mask:
            self.mask.update(ctx.lm, res.emitted)
            self.since_esp += 1
        self.esp_top, self.live = None, False
        for r, secs in res.timed:
            self.curve.observe(r, secs)
        return Notes(cost={"budget": self.bc, "rows": 1, "cap": self.cap, "mode": "plain", "expected_tokens": 1.0,
                           "reliability": round(self.gain, 4), "predicted_s": self.curve.predict(1),
                           "measured_s": res.timed[-1][1] if res.timed else res.forward_s,
                           "curve": self.curve.to_dict(), "drift": round(self.curve.drift, 4), "backoff": None})

    clock = staticmethod(time.perf_counter)

    def step_seconds(self, res: StepResult) -> float:
        """What this step cost, as `Backoff` books it: from the start of `propose` to now (the end of
        `observe`), so the drafting's Python counts as well as the forward."""
        return self.clock() - self.t0

    def _top(self, logits: torch.Tensor, s) -> list[torch.Tensor]:
        """[tokens, probs] of the target's top distribution after every fed node, on the device."""
        if s.greedy:
            # Into a kept buffer: a fresh (block, vocabulary) tensor costs more in page faults than the softmax.
            b = self.buf
            if b is None or len(b) < len(logits) or (b.shape[1], b.dtype, b.device) != (logits.shape[1], logits.dtype, logits.device):
                self.buf = b = logits.new_empty(max(len(logits), self.cap), logits.shape[1])
            dist = torch.softmax(logits, -1, out=b[: len(logits)])
        else:
            dist = target_probs(logits.double(), s)
        p, t = top_k(dist, min(self.top, dist.shape[-1]))
        return [t, p]

    def _harvest(self, ctx: Context, res: StepResult, tokens: list[list[int]], probs: list[list[float]]) -> None:
        """Add the target's top distributions after every fed node (host lists, row per node) to the table."""
        end = len(ctx.tokens) - len(res.emitted)  # the text up to and including the root
        tail = ctx.tokens[max(0, end - self.n) : end]
        for v, (toks, ps) in enumerate(zip(tokens, probs)):
            self.table.add((tail + list(self.path_of[v]))[-self.n :], toks, ps)
