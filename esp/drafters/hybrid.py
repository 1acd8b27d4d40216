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
  path ended on a lookup node: a copy that holds tends to hold on); a node's P is the product along its path,
  scaled by the reliability (accepted drafts over their sum of P: under `bc=auto` this call's own, shrunk towards
  the drafter's, since how well drafts hold differs from prompt to prompt). Labels are free:
  the verifier hands over the target's choice after every fed node (`StepResult.choices`, by its own rule),
  so every candidate child of every fed node (fed or not) is labelled.
- Budget. Best-first by P gives candidates whose every prefix is a valid tree; `budget.choose` picks how
  many to feed and where to put masks, maximising expected tokens per second under the measured curve
  (`bc=auto`) or expected tokens under a fixed cap (`bc=N`, which then fills its N rows). Under `bc=auto` the
  growth stops once no further candidate can change that choice (`budget.grown_enough`): a step that will feed one
  row mostly grows none.
- Back-off (`bc=auto`). `budget.Backoff` books every drafted step's measured time against plain steps and
  runs plain one-row steps (no tree is grown) while drafting does not pay, probing again after
  geometrically growing gaps; its docstring states the regret bound. Its per-call loss cap admits a width only
  while the call's net loss against plain steps stays within eps per step plus L0 (`Backoff.affordable`); a step
  with no width admitted is plain: no tree grown, and its learning only what later steps need (`_rest`).
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
The step's records: `propose` returns the fed tree with a `HybridStep` plan (the grown `Draft`, the width
`Choice`, when the step started); `observe` learns from that plan and the verifier's choices in the
`StepResult` (esp.decoding.drafter). Across steps the drafter keeps only what it learns (`Memory`), the running
prompt's lookup and what the last step left for the next (`Carry`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from esp.budget.batch import BatchWidth
from esp.budget.calibrate import Calibrator, bucket
from esp.budget.cost import CostCurve, curve_for
from esp.budget.prior import Prior, prior_for
from esp.budget.width import Backoff, Choice, best_rate, by_rows, choose, grown_enough
from esp.decoding.drafter import Context, Drafter, Notes, Offer, Proposal, StepResult
from esp.decoding.tree import DraftTree
from esp.device import read_all
from esp.drafters.candidates import RANKS, Draft, Enough, Evidence, History, Lookup, grow
from esp.drafters.esp import INITS, MaskEmbedding
from esp.drafters.stand import NGramTable
from esp.errors import ESPError
from esp.sampling import probs as target_probs
from esp.sampling import top_k
from esp.trace import ESP, LOOKUP, SOURCES, TABLE

AUTO = "auto"
AUTO_CAP = 64  # widest block bc=auto considers (a CPU never gets there; a GPU rarely needs more)
GROW_FLOOR = 0.01  # under bc=auto, candidates less likely than this are not worth a row anywhere
ESP_FIRST = 32  # ESP candidates ranked at depth 1 (the mask distribution covers the whole vocabulary)
TOP = 6  # tokens kept per table context and deeper ESP level: 10 drafted no better at bc=60 (tau 2.25 vs 2.27), 4 worse (2.16)
PLAIN_MARGIN = 0.1  # under bc=auto a draft must beat a plain one-row step by this share: P runs optimistic
PROBE_EVERY = 8  # steps without ESP drafts after which masks are fed anyway, to keep measuring their value,
PROBE_LOSS = 0.1  # if that step's expected tokens per second drop by at most this share
STARTS = ("cold", "hot")
PRIORS = ("auto", "none")  # the model's saved or shipped calibration prior, or a flat start
MEMORY = 2  # each new observation of a table context weighs 1/2 (tau at bc=60, 26 dev questions, hot / cold: a
# running mean 2.13 / 2.21, this 2.48 / 2.36; the other weights tried are in docs/BENCHMARKS.md)
HISTORY = 8192  # tokens of earlier prompts and outputs a hot drafter's lookup searches
MASK_START = [1.0, 4.0]  # a mask's value before any evidence: [tokens owed, steps]
RELIABILITY_START = [4.0, 4.0]
CALL_TRUST = 4.0  # under bc=auto, the sum of P's worth of the drafter's reliability a call's own is shrunk towards


@dataclass(frozen=True, kw_only=True)
class HybridConfig:
    """The hybrid's settings (its method spec's), checked: bad values raise ESPError with one line."""

    name: str = "hybrid"
    bc: int | str = AUTO
    k: int = 1  # masks per masked node (0 when ESP is not a source)
    lam: float = 0.1
    init: str = "mean"
    sources: tuple[str, ...] = (ESP, LOOKUP, TABLE)  # in SOURCES order
    top: int = TOP
    n: int = 4
    match: int = 8
    draft: int = 32
    start: str = "cold"
    prior: str = "auto"

    def __post_init__(self):
        name, bc, sources = self.name, self.bc, self.sources
        if not (bc == AUTO or (isinstance(bc, int) and bc >= 1)):
            raise ESPError(f"{name}: BC must be 'auto' or a positive integer, not {bc!r}.")
        if not set(sources) <= {ESP, LOOKUP, TABLE} or not sources:
            raise ESPError(f"{name}: sources must be some of esp, lookup, table, not {sources!r}.")
        if ESP in sources and not (isinstance(self.k, int) and 1 <= self.k <= 4):
            raise ESPError(f"{name}: k (mask tokens) must be an integer from 1 to 4, not {self.k}.")
        if not 0 <= self.lam <= 1:
            raise ESPError(f"{name}: lambda (EMA rate) must be in [0, 1], not {self.lam}.")
        if self.init not in INITS:
            raise ESPError(f"{name}: mask init must be one of {', '.join(INITS)}, not {self.init!r}.")
        if self.start not in STARTS:
            raise ESPError(f"{name}: start must be cold (each prompt from the prior) or hot (learning kept across prompts), not {self.start!r}.")
        if self.prior not in PRIORS:
            raise ESPError(f"{name}: prior must be auto (the model's calibration prior, if any) or none, not {self.prior!r}.")
        for what, v in (("top", self.top), ("n", self.n), ("match", self.match), ("draft", self.draft)):
            if not (isinstance(v, int) and v >= 1):
                raise ESPError(f"{name}: {what} must be a positive integer, not {v!r}.")
        object.__setattr__(self, "sources", tuple(s for s in SOURCES if s in sources))
        object.__setattr__(self, "k", self.k if ESP in sources else 0)

    @property
    def cap(self) -> int:
        """The widest block: bc=N's N rows, or the widest bc=auto considers."""
        return AUTO_CAP if self.bc == AUTO else self.bc

    @property
    def key(self) -> str:
        """What the prior's per-source-set values are filed under."""
        return "+".join(self.sources)


class Memory:
    """What a hybrid has learned, started from a prior: calibration counts, what each mask's drafts have added,
    its reliability (accepted drafts against their sum of P), the table of the model's distributions, earlier
    text to copy from (hot) and the back-off (bc=auto, made at the first prompt that needs one)."""

    def __init__(self, prior: Prior, cfg: HybridConfig):
        self.calibrator = Calibrator()
        self.calibrator.counts = prior.counts
        masks = prior.mask_value.get(cfg.key, [])
        # per mask j: tokens owed to its drafts, [sum, steps]
        self.mask_value = [list(masks[j]) if j < len(masks) else list(MASK_START) for j in range(cfg.k)]
        self.reliability = list(prior.reliability.get(cfg.key, RELIABILITY_START))
        self.table = NGramTable(cfg.n, cfg.top, MEMORY)
        self.history = History(cfg.match, HISTORY)  # earlier prompts and outputs, searched by a hot drafter's lookup
        self.backoff: Backoff | None = None

    def prior(self, key: str) -> Prior:
        """What has been learned, as a prior (a copy)."""
        return Prior(self.calibrator.counts, {key: self.mask_value}, {key: self.reliability}).copy()

    def mask_worth(self, k: int) -> float:
        """Expected tokens that k masks on the node where the path ends add to the next step."""
        return sum(total / steps for total, steps in self.mask_value[:k])

    @property
    def gain(self) -> float:
        return self.reliability[0] / self.reliability[1]


@dataclass(kw_only=True)
class Carry:
    """What the last step leaves for the next one."""

    esp_top: list[list[tuple[int, int, int]]] | None = None  # per depth: ESP's (token, band, rank) from its masks
    live: bool = False  # its accepted path ended on a lookup node: the copy still holds
    since_esp: int = 0  # steps since ESP drafts were last available
    tail: float = 0.0  # seconds its `observe` ran after booking it with the back-off: booked with the next step


@dataclass(kw_only=True)
class HybridStep:
    """The hybrid's record of one step, from `propose` to `observe` (Proposal.plan)."""

    draft: Draft | None  # the grown candidates; None: a plain step, nothing drafted
    choice: Choice
    started: float  # the clock when `propose` began: the back-off books the whole step
    resting: bool = False  # a batch's plain step (its budget backed off): learn only what later steps need
    drafting: float = 0.0  # seconds `propose` took
    learning: float = 0.0  # the clock when `observe` began
    booked: float = 0.0  # the clock when `observe` booked the step with the back-off
    before: float = 0.0  # seconds the last step's `observe` ran after its booking (`Carry.tail`), booked with this one


@dataclass(kw_only=True)
class Seen:
    """What the step's learning reads back from the device, in one read."""

    top: tuple[list[list[int]], list[list[float]]] | None = None  # the target's top tokens, probs after each fed node
    esp_top: list[list[tuple[int, int, int]]] | None = None  # from the masks at the accepted path's end
    ema: dict[str, float] | None = None  # the mask state, for the trace
    fed_masks: bool = False  # masks were fed at the accepted path's end


class HybridDrafter(Drafter):
    """One calibrated, cost-budgeted tree from any subset of ESP masks, lookup and the logit table. A batch
    budget sizes it through `offer` (esp.budget.batch.Budgeted)."""

    def __init__(self, bc: int | str = AUTO, k: int = 1, lam: float = 0.1, init: str = "mean",
                 sources: tuple[str, ...] = (ESP, LOOKUP, TABLE), top: int = TOP, n: int = 4,
                 match: int = 8, draft: int = 32, name: str = "hybrid", curve: CostCurve | None = None,
                 start: str = "cold", prior: str = "auto"):
        self.cfg = HybridConfig(name=name, bc=bc, k=k, lam=lam, init=init, sources=sources, top=top, n=n,
                                match=match, draft=draft, start=start, prior=prior)
        self.name = name
        self.curve: CostCurve | None = None if curve is None else curve.copy()  # this drafter's own
        self.mask = MaskEmbedding(self.cfg.k, lam, init) if self.cfg.k else None
        self.initial: Prior | None = None  # the prior this drafter starts every cold prompt from (read at the first)
        self.memory = Memory(Prior(), self.cfg)
        self.text: list[int] = []  # the running prompt's tokens (prompt + output), for a hot drafter's history
        self.lookup: Lookup | None = None
        self.guard: Backoff | None = None  # the back-off this prompt books its steps with (none in a batch)
        self.trust = [0.0, 0.0]  # this call's accepted drafts and their sum of P (`gain`)
        self.carry = Carry()
        self.buf: torch.Tensor | None = None  # the target's distributions over a block, reused step to step

    @property
    def source(self) -> str | None:
        return self.cfg.sources[0] if len(self.cfg.sources) == 1 else None

    @property
    def times_forward(self) -> bool:
        """bc=auto learns the cost curve from each forward's measured time (see Drafter.times_forward)."""
        return self.cfg.bc == AUTO

    def describe(self) -> str:
        c = self.cfg
        lam = f" lam={c.lam}" if self.mask else ""
        hot = " start=hot" if c.start == "hot" else ""
        return f"{c.name} bc={c.bc} sources={c.key}" + (f" k={c.k}{lam}" if c.k else "") + hot

    def learned(self) -> Prior:
        """What this drafter has learned so far, as a prior (a copy: `esp.budget.prior.save` writes it)."""
        return self.memory.prior(self.cfg.key)

    # ------------------------------------------------------------------ per prompt

    def start(self, ctx: Context) -> None:
        """Cold: learned state afresh from the prior; hot: kept, the last prompt's text joining the history."""
        cfg = self.cfg
        if self.curve is None:  # the machine's prior, never timed here: the steps' own forwards correct it
            self.curve = curve_for(ctx.lm)
        if self.initial is None:
            self.initial = (prior_for(ctx.lm) if cfg.prior == "auto" else None) or Prior()
            self.memory = Memory(self.initial.copy(), cfg)
        elif cfg.start == "cold":
            self.memory = Memory(self.initial.copy(), cfg)
        else:
            self.memory.history.add(self.text)
        self.text = ctx.tokens  # the engine extends this list as the prompt's output grows
        if LOOKUP in cfg.sources:
            self.lookup = Lookup(cfg.match, self.memory.history)
        self.guard = None  # this prompt's back-off: in a batch, the batch budget backs off for all rows
        self.trust = [0.0, 0.0]
        if cfg.bc == AUTO and not ctx.batched:
            if self.memory.backoff is None:
                self.memory.backoff = Backoff()
            self.guard = self.memory.backoff
            self.guard.start()
        if TABLE in cfg.sources:
            self.memory.table.seed(ctx.tokens)
        if self.mask:
            self.mask.start(ctx)
        self.carry = Carry()

    # ------------------------------------------------------------------ drafting

    def batch_planner(self) -> BatchWidth | None:
        """bc=auto in a batch: one width for all rows, from every row's offer (see `offer`)."""
        return BatchWidth(PLAIN_MARGIN) if self.cfg.bc == AUTO else None

    def offer(self, ctx: Context) -> Offer:
        """This step's candidates, grown now, and the most expected tokens a block of at most r rows would give
        them, r = 0..cap (a batch budget picks one width for all rows; `propose` then takes the draft back)."""
        draft, worth = self._draft(ctx), self.memory.mask_worth
        parents = draft.tree.parents[1:]
        best = np.max([by_rows(draft.p, parents, j, worth(j), self.cfg.cap) for j in self._mask_counts()], axis=0)
        return Offer(tokens=best, draft=draft)

    def propose(self, ctx: Context) -> Proposal:
        """The step's block: its width chosen here (bc=auto: by measured cost; bc=N: N rows), or at most
        `ctx.budget.rows` rows when a batch budget chose the width."""
        started, budget = self.clock(), ctx.budget
        offered = budget.offer.draft if budget is not None and budget.offer is not None else None
        if (budget is not None and budget.rows == 1 and offered is None) or self._held(ctx):
            # Nothing drafted (a batch's plain step, or this prompt backed off / out of loss allowance): a plain step
            # that learns only what later steps need, so that it costs what plain decoding's step costs. Most steps
            # of a call whose drafts do not pay are these, so it is decided before any cost table is built.
            plain = HybridStep(draft=None, choice=Choice(n=0, masked=(), rows=1, expected=1.0,
                                                         seconds=self.curve.predict(1)), started=started, resting=True)
            return self._timed(Proposal(tree=DraftTree([ctx.tokens[-1]], [-1], [1.0], [1.0], sources=[()], p=[1.0]),
                                        plan=plain))
        cost = self._priced(ctx)
        draft = offered or self._draft(ctx, cost)
        c = self._width(ctx, draft, cost)
        tree, n = draft.tree, c.n + 1
        fed = DraftTree(tree.tokens[:n], tree.parents[:n], tree.probs[:n], tree.cum_probs[:n], sources=tree.sources[:n],
                        p=tree.p[:n])
        k, embeds = (c.k if c.masked else 0), None
        if k:
            self.mask.update(ctx.lm, [])  # what the steps since the masks were last fed deferred
            embeds = self.mask.embeds(ctx.lm.dtype)[:k]
        # Masks sit on at most a few nodes: their head rows ride along in the nodes' head call.
        return self._timed(Proposal(tree=fed, k=k, mask_embeds=embeds, masked=c.masked, head_all=True,
                                    plan=HybridStep(draft=draft, choice=c, started=started)))

    def _timed(self, prop: Proposal) -> Proposal:
        """`prop`, its plan holding how long `propose` took (the back-off books the drafter's own time)."""
        prop.plan.drafting = self.clock() - prop.plan.started
        return prop

    def _priced(self, ctx: Context) -> np.ndarray | None:
        """The step's cost table under `bc=auto` alone (None under a flat budget or a batch's): the curve, with the
        widths the per-call loss cap does not admit, by their worst cases on the curve's own estimate, priced at
        infinity (`Backoff.affordable`). A step the cap holds to one row never gets here (`_held`)."""
        if self.cfg.bc != AUTO or ctx.budget is not None:
            return None
        cost = self.curve.table(self.cfg.cap, explore=True)
        if self.guard is None or ctx.step == 0:
            return cost
        return self.guard.affordable(cost, self.curve.table(self.cfg.cap))

    def _held(self, ctx: Context) -> bool:
        """Whether this prompt's back-off holds the step to one row: backed off, or no width past one row within the
        loss cap's room (`Backoff.admits`), read from the curve's knots (`CostCurve.least`), so that a step that can
        only be plain builds no table."""
        guard, curve = self.guard, self.curve
        if guard is None or ctx.step == 0 or ctx.budget is not None:
            return False
        return not guard.admits(curve.least(2, self.cfg.cap), curve.predict(1))

    def _width(self, ctx: Context, draft: Draft, cost: np.ndarray | None) -> Choice:
        """How many candidates to feed and where the masks go, on the step's cost table (`_priced`)."""
        k, worth, budget, p, parents = self.cfg.k, self.memory.mask_worth, ctx.budget, draft.p, draft.tree.parents[1:]
        cap = self.cfg.cap if budget is None else budget.rows
        if ctx.step == 0 and cost is not None:
            # bc=auto's prefill feeds no drafts, only the masks on the root (the next step's drafts): its rows ride
            # after the prompt at a cost the decode curve does not price, and drafts from the prompt alone are
            # next to never accepted (13 development questions, float32: 3 of 163 rows, which cost 0.5-1.2 plain
            # steps a prefill).
            p = p[:0]
        c = max((choose(p, parents, j, worth(j), cap, cost, margin=PLAIN_MARGIN) for j in self._mask_counts()),
                key=Choice.score)
        if not c.masked and self._probe_due(ctx, cap):
            # Feed masks anyway now and then, so their value keeps being measured, if that costs little
            # (the prefill feeds the whole prompt, so its mask rows cost next to nothing).
            floor = None if ctx.step == 0 or cost is None else (1 - PROBE_LOSS) * c.expected / c.seconds
            if floor is None or best_rate(p, worth(k), cost, 1 + k) >= floor:
                probe = choose(p, parents, k, worth(k), cap, cost, force_mask=True)
                if floor is None or probe.expected / probe.seconds >= floor:
                    c = probe
        return c

    def _mask_counts(self) -> range:
        """Masks per masked node a width choice weighs: fewer than k compete with k, mask j's drafts worth what they
        have added so far (none without ESP)."""
        return range(min(self.cfg.k, 1), self.cfg.k + 1)

    def _probe_due(self, ctx: Context, cap: int) -> bool:
        """Whether a step with no masks chosen should feed them anyway, so that their value keeps being measured:
        at the prefill, and after PROBE_EVERY steps without ESP drafts."""
        k = self.cfg.k
        return bool(k) and cap > k and (ctx.step == 0 or self.carry.since_esp >= PROBE_EVERY)

    def _draft(self, ctx: Context, cost: np.ndarray | None = None) -> Draft:
        """Grow this step's candidates; with their path probabilities scaled by the reliability (`gain`). On a
        step's cost table (`_priced`), only as many as can change its width choice (`_enough`)."""
        cfg, memory, gain = self.cfg, self.memory, self.gain
        paths = self.lookup.paths(ctx.tokens, cfg.draft) if LOOKUP in cfg.sources else {}
        ev = Evidence(sources=cfg.sources, table=memory.table, n=cfg.n, esp_top=self.carry.esp_top, paths=paths,
                      calibrator=memory.calibrator, live=self.carry.live)
        enough = None if cost is None else self._enough(ctx, cost, gain)
        tree, cands, path_of = grow(ctx.tokens, ev, cfg.cap, GROW_FLOOR if cfg.bc == AUTO else 0.0, enough)
        p = np.minimum(np.asarray(tree.cum_probs[1:], dtype=np.float64) * gain, 1.0)  # host numbers: numpy
        esp = None if self.carry.esp_top is None else len(self.carry.esp_top)
        return Draft(tree=tree, p=p, cands=cands, path_of=path_of, gain=gain, esp_depths=esp)

    @property
    def gain(self) -> float:
        """What P is scaled by: how optimistic it runs, accepted drafts over their sum of P. Under bc=auto, this call's
        own rate shrunk towards the drafter's (CALL_TRUST): how well drafts hold differs from prompt to prompt (13
        development questions, float32, cold: 0.5x their sum of P on one, 1.45x on another, with the drafter's at 1.0),
        and a width choice that trusts the drafter's rate keeps feeding rows to a prompt whose drafts do not hold."""
        g = self.memory.gain
        if self.cfg.bc != AUTO:
            return g
        accepted, total = self.trust
        return (accepted + CALL_TRUST * g) / (total + CALL_TRUST)

    def _enough(self, ctx: Context, cost: np.ndarray, gain: float) -> Enough:
        """When growing more candidates cannot change `_width`'s choice on `cost` (`grown_enough`): most steps that
        feed one row then grow none, and the prefill (which feeds no drafts) never does."""
        if ctx.step == 0:
            return lambda p, q: True
        masks, prices = [(j, self.memory.mask_worth(j)) for j in self._mask_counts()], cost.tolist()
        probe = 1 - PROBE_LOSS if self._probe_due(ctx, self.cfg.cap) else None
        return lambda p, q: grown_enough([min(x * gain, 1.0) for x in p], min(q * gain, 1.0), masks, prices,
                                         PLAIN_MARGIN, probe)

    # ------------------------------------------------------------------ learning

    def observe(self, ctx: Context, res: StepResult) -> Notes:
        """Learn from the step: label the candidates by the verifier's choices, feed the table, book the masks'
        value, the back-off and the cost curve; the trace gets the masks' state and how the width was chosen."""
        step: HybridStep = res.proposal.plan
        step.learning, step.before = self.clock(), self.carry.tail
        notes = self._rest(ctx, res) if step.resting else self._learn(ctx, res)
        self.carry.tail = self.clock() - step.booked
        return notes

    def _learn(self, ctx: Context, res: StepResult) -> Notes:
        """`observe` for a step that was not resting."""
        step: HybridStep = res.proposal.plan
        seen = self._read(ctx, res)
        if step.draft is not None:
            self._label(step.draft, res)
        if seen.top is not None:
            self._harvest(ctx, res, step, *seen.top)
        tree = res.proposal.tree
        live = len(res.path) > 1 and bool(tree.sources) and LOOKUP in tree.sources[res.path[-1]]
        if step.draft is not None and step.draft.esp_depths is not None and tree.sources:
            self._book_masks(step.draft.esp_depths, res)
        since = 0 if seen.fed_masks else self.carry.since_esp + 1
        self.carry = Carry(esp_top=seen.esp_top, live=live, since_esp=since if self.mask else self.carry.since_esp)
        return Notes(ema=seen.ema, cost=self._cost(ctx, res, step))

    def _read(self, ctx: Context, res: StepResult) -> Seen:
        """Everything the step's learning needs from the device, read back at once (one sync): the target's top
        tokens and probabilities after every fed node, ESP's candidates from the masks at the end of the
        accepted path, and, where those masks were fed, the mask state for the trace (the masks move with the
        emitted tokens first). Where none were, the masks' move waits until they are next fed (`propose`): the
        same m then, without device calls on a step that does not read it."""
        parts = self._top(res, ctx.sampling) if TABLE in self.cfg.sources else []
        mask_rows = res.layout.mask_rows(res.path[-1]) if self.mask else []
        if mask_rows:
            dists = torch.softmax(res.logits(mask_rows, ctx.lm), dim=-1)  # from the step's one head call (head_all)
            # Depth 1 is opened once (at the root), so it can afford a longer list than deeper levels.
            esp_p, esp_t = torch.topk(dists, min(ESP_FIRST, dists.shape[-1]), dim=-1)
            parts += [esp_t, esp_p]
            self.mask.update(ctx.lm, res.emitted)
            parts.append(self.mask.summary())
        elif self.mask:
            self.mask.defer(res.emitted)
        got = read_all(parts)
        seen = Seen(fed_masks=bool(mask_rows))
        if TABLE in self.cfg.sources:
            seen.top, got = ([[int(x) for x in row] for row in got[0]], got[1]), got[2:]
        if mask_rows:
            keep = [ESP_FIRST] + [self.cfg.top] * (len(mask_rows) - 1)
            seen.esp_top = [[(int(tok), bucket(q), min(r, RANKS)) for r, (tok, q) in enumerate(zip(tt[:n], pp[:n]))]
                            for tt, pp, n in zip(got[0], got[1], keep)]
            seen.ema = MaskEmbedding.named(got[2])
        return seen

    def _label(self, draft: Draft, res: StepResult) -> None:
        """Free labels: the target's choice after every fed node (the verifier's, `res.choices`) labels every
        candidate child of that node, fed or not. Children of rejected nodes count too: they rank candidates
        better (measured: tau 2.05 against 1.78 at bc=60 on six development questions), though they make P a
        little optimistic for deep paths, which the reliability corrects in sum."""
        tree, memory, choices = res.proposal.tree, self.memory, res.choices
        tally: dict[tuple, list[int]] = {}  # a step labels the same keys many times: count, then update once
        for v in range(len(tree)):
            cands = draft.cands.get(v, ())
            if not cands:
                continue
            want = choices[v]
            for c in cands:
                t = tally.get(c.keys)
                if t is None:
                    tally[c.keys] = t = [0, 0]
                t[0] += c.token == want
                t[1] += 1
        for keys, (accepted, seen) in tally.items():
            memory.calibrator.update(keys, accepted, seen)
        # The fed tree may be a cut of the proposal (esp.bench.whatif feeds the root alone at a resumed prefill).
        self._trusted(len(res.path) - 1, sum((tree.p or [1.0])[1:]))
        best = draft.cands.get(0)
        if len(tree) == 1 and best:
            # A step that fed no node still labels the root's best candidate: booked as if fed, so that a
            # reliability driven down by a few bad early steps can recover. Otherwise it is absorbing: a low
            # reliability scales every P below what a row costs, nothing is fed, and nothing moves it again
            # (what locked `hybrid:bc=auto:sources=esp` out for whole runs; docs/BENCHMARKS.md).
            self._trusted(float(best[0].token == choices[0]), best[0].cond)

    def _trusted(self, accepted: float, total: float) -> None:
        """Book accepted drafts against their sum of P: the drafter's reliability and this call's."""
        for book in (self.memory.reliability, self.trust):
            book[0] += accepted
            book[1] += total

    def _book_masks(self, depths: int, res: StepResult) -> None:
        """What ESP added: without its first ESP-only node on the accepted path, the path would have stopped
        there (that token becoming the bonus), so every token accepted from it on is owed to the mask that
        drafted its depth (`depths`: the depths the last step's masks drafted)."""
        tree, path = res.proposal.tree, res.path[1:]
        first = next((d for d, v in enumerate(path) if tree.sources[v] == (ESP,)), None)
        for d, book in enumerate(self.memory.mask_value[:depths]):
            book[0] += len(path) - d if d == first else 0
            book[1] += 1

    def _cost(self, ctx: Context, res: StepResult, step: HybridStep) -> dict:
        """Book the step with the back-off and the curve; what the trace shows of how its width was chosen."""
        rows, guard = res.layout.size, self.guard
        mode = "draft" if step.draft is not None or ctx.step == 0 else "plain"  # plain: backed off, no tree grown
        self._book(ctx, res, step)
        gain = 1.0 if step.draft is None else step.draft.gain
        return self._costs(res, mode, step.choice.expected, gain, guard.state() if guard is not None else None)

    def _book(self, ctx: Context, res: StepResult, step: HybridStep) -> None:
        """Book a step with this prompt's back-off (the prefill also holds the prompt: not a step to book)."""
        if ctx.step > 0 and self.guard is not None:
            rows, secs = res.layout.size, self.step_seconds(res)
            # until a plain step is timed, the curve's shape says what one costs
            self.guard.observe(rows, len(res.emitted), secs, secs * self.curve.predict(1) / self.curve.predict(rows),
                               host=self.host_seconds(res), tried=not step.resting)
        step.booked = self.clock()

    def _costs(self, res: StepResult, mode: str, expected: float, gain: float, backoff: dict | None,
               learn: bool = True) -> dict:
        """The curve learns from the forwards timed by now (prefills never are; nor a batch's plain steps, whose
        curve is the batch budget's); StepTrace.cost's keys."""
        for r, secs in res.forward.timed if learn else ():
            self.curve.observe(r, secs)
        rows, timed = res.layout.size, res.forward.timed
        return {"budget": self.cfg.bc, "rows": rows, "cap": self.cfg.cap, "mode": mode,
                "expected_tokens": round(expected, 4), "reliability": round(gain, 4),
                "predicted_s": self.curve.predict(rows), "measured_s": timed[-1][1] if timed else res.forward.seconds,
                "curve": self.curve.to_dict(), "drift": round(self.curve.drift, 4), "backoff": backoff}

    def _rest(self, ctx: Context, res: StepResult) -> Notes:
        """A plain step that drafted nothing (a batch's budget, or this prompt's back-off, said so): only what
        later steps need, the masks' EMA, the emitted text in the table (as its prompt was seeded), the forward's
        time and the back-off's books, so that the step runs at plain decoding's cost."""
        since = self.carry.since_esp
        if self.mask:
            self.mask.defer(res.emitted)  # applied, in order, when the masks are next read
            since += 1
        if TABLE in self.cfg.sources:  # the target's own tokens, one-hot: no distribution read back
            text, n = ctx.tokens, self.cfg.n
            for j in range(len(text) - len(res.emitted), len(text)):
                self.memory.table.add(text[max(0, j - n) : j], [text[j]], [1.0])
        self.carry = Carry(since_esp=since)
        self._book(ctx, res, res.proposal.plan)
        return Notes(cost=self._costs(res, "plain", 1.0, 1.0, None if self.guard is None else self.guard.state(),
                                      learn=not ctx.batched))

    clock = staticmethod(time.perf_counter)

    def step_seconds(self, res: StepResult) -> float:
        """What this step cost, as `Backoff` books it: from the start of `propose` to now (`observe` booking it),
        and the last step's learning after its booking, so the drafting's Python counts as well as the forward."""
        return self.clock() - res.proposal.plan.started + res.proposal.plan.before

    def host_seconds(self, res: StepResult) -> float:
        """This drafter's own work in `step_seconds`: `propose`, `observe` so far and the last step's tail. Plain
        decoding does none of it, so the back-off books it as lost even on a one-row step."""
        step = res.proposal.plan
        return step.drafting + self.clock() - step.learning + step.before

    def _top(self, res: StepResult, s) -> list[torch.Tensor]:
        """[tokens, probs] of the target's top distribution after every fed node, on the device."""
        logits, k = res.node_logits, min(self.cfg.top, res.node_logits.shape[-1])
        if not s.greedy:
            p, t = top_k(target_probs(logits.double(), s), k)
            return [t, p]
        # Into a kept buffer: a fresh (block, vocabulary) tensor costs more in page faults than the softmax.
        b = self.buf
        if b is None or len(b) < len(logits) or (b.shape[1], b.dtype, b.device) != (logits.shape[1], logits.dtype, logits.device):
            self.buf = b = logits.new_empty(max(len(logits), self.cfg.cap), logits.shape[1])
        dist = torch.softmax(logits, -1, out=b[: len(logits)])
        rows = res.ranked
        if rows is None or len(rows[0]) < 2 * k:
            p, t = top_k(dist, k)
            return [t, p]
        # The softmax keeps each row's order, which the verifier's read has ranked already: a second top-k over the
        # block cost more than the softmax itself (13 rows of 49152: 180 against 160 us on the 2-core EPYC, float32).
        t = torch.tensor([row[:k] for row in rows], dtype=torch.long, device=logits.device)
        return [t, dist.gather(1, t)]

    def _harvest(self, ctx: Context, res: StepResult, step: HybridStep, tokens: list[list[int]],
                 probs: list[list[float]]) -> None:
        """Add the target's top distributions after every fed node (host lists, row per node) to the table."""
        n = self.cfg.n
        end = len(ctx.tokens) - len(res.emitted)  # the text up to and including the root
        tail = ctx.tokens[max(0, end - n) : end]
        path_of = step.draft.path_of if step.draft is not None else {0: ()}
        for v, (toks, ps) in enumerate(zip(tokens, probs)):
            self.memory.table.add((tail + list(path_of[v]))[-n :], toks, ps)
