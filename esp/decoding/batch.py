"""Many prompts per forward: every row its own drafter, tree, positions and mask rows, one forward per step.

The cache is one (rows, heads, slots, dim) tensor per layer. Row r's committed tokens fill its first c_r
slots in order, so slot j holds position j: each step appends the block at slots L.. (L = the longest
row's c), the mask hides slots c_r..L-1 from row r, and the commit moves the row's accepted rows down to
slots c_r.. (a copy of those rows alone). Rows' caches therefore never hold holes between their tokens,
only the tail padding a rectangle needs, and a row that ends (EOS or its token limit) leaves the batch at
once. Every row is verified and committed on its own (`Run.finish`, as alone), so each row's tokens are
its greedy tokens; the traces stay per row. Prompts are prefilled in groups of like length rather than as one
left-padded rectangle, their cache rows then joining the batch's. With more prompts than `batch_size`, a finished
row's place goes to the next waiting prompt (continuous batching), so the batch stays full while the prompts'
answers end at different steps.
"""
from __future__ import annotations

import itertools
import time
from collections import deque
from typing import Iterator

import torch

from esp.decoding.drafter import BatchPlanner, Drafter
from esp.decoding.engine import Decoder, Generation, Run, lead_mask
from esp.decoding.timer import ForwardTimer, Phases
from esp.decoding.verify import top_rows
from esp.errors import ESPError
from esp.models import kvcache
from esp.models.lm import LM
from esp.sampling import Sampling
from esp.trace import StepTrace, summarize

PREFILL_SLACK = 1.25  # a prefill forward may pad its prompts to at most this much more than their tokens


class BatchDecoder:
    """Decodes several prompts together; `drafters` holds one drafter per prompt (none shared)."""

    def __init__(self, lm: LM, drafters: list[Drafter], sampling: Sampling = Sampling(), max_new_tokens: int = 128,
                 layouts: str = "efficient", trace_mask: bool = False, timings: bool = False,
                 planner: BatchPlanner | None = None, batch_size: int | None = None, views: bool = False):
        """`planner`: what sets the batch's widths (default: the drafters' own, if any; `esp.methods.build_batch`
        gives one that pads where a wider forward is cheaper). `batch_size`: the most prompts decoded at once (None:
        all of them); the others wait and join as rows end. `views`: every row records the alignment, the Mask
        Lens and the verifier's eye (`Decoder(align=True, lens=True)`), as it would alone."""
        if len({id(d) for d in drafters}) != len(drafters):
            raise ESPError("Each prompt of a batch needs a drafter of its own.")
        if batch_size is not None and not (isinstance(batch_size, int) and not isinstance(batch_size, bool) and batch_size >= 1):
            raise ESPError(f"The batch size must be a positive integer, not {batch_size!r}.")
        self.batch_size = batch_size or max(len(drafters), 1)
        self.lm = lm
        self.rows = [Decoder(lm, d, sampling, max_new_tokens, layouts, views, trace_mask, timings, lens=views)
                     for d in drafters]
        self.planner = planner if planner is not None else drafters[0].batch_planner() if drafters else None

    def check_prompt(self, prompt_ids: list[int]) -> None:
        self.rows[0].check_prompt(prompt_ids)

    @torch.inference_mode()
    def stream(self, prompts: list[list[int]]) -> Iterator[tuple[int, StepTrace]]:
        """Decode every prompt, yielding (prompt index, trace) for each row of each forward, in row order.
        At most `batch_size` prompts are in flight; when rows end, the next waiting prompts are admitted in order:
        their prefill is a forward of their own (prompts of like length together, `_prefill_groups`), whose cache then
        joins the batch's."""
        if len(prompts) != len(self.rows):
            raise ESPError(f"{len(prompts)} prompts for {len(self.rows)} drafters: give one drafter per prompt.")
        waiting = deque(range(len(prompts)))
        batch = LiveBatch(self.lm, self.planner, timed=any(dec.time_forward for dec in self.rows))
        index: dict[int, int] = {}  # id(run) -> its prompt's index
        while waiting or batch.runs:
            if waiting and len(batch.runs) < self.batch_size:
                new = [waiting.popleft() for _ in range(min(self.batch_size - len(batch.runs), len(waiting)))]
                runs = [Run(self.rows[i], prompts[i], batched=True) for i in new]
                index.update((id(run), i) for run, i in zip(runs, new))
                steps = batch.join(runs, bool(waiting))
            else:
                steps = batch.step(bool(waiting))
            for run, trace in steps:
                yield index[id(run)], trace

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        """Run every prompt to its end: one Generation per prompt, in order (seconds: the batch's wall time)."""
        clock = Phases(self.lm.device)
        start = clock.now()
        steps: list[list[StepTrace]] = [[] for _ in prompts]
        for i, trace in self.stream(prompts):
            steps[i].append(trace)
        seconds = clock.now() - start
        out = []
        for dec, st in zip(self.rows, steps):
            tokens = [t for s in st for t in s.emitted]
            out.append(Generation(tokens, self.lm.tokenizer.decode(tokens, skip_special_tokens=True), st,
                                  summarize(dec.drafter.name, st, seconds)))
        return out


class LiveBatch:
    """The rows decoding together now, in the cache's row order, and one forward per step for all of them. Rows
    join between steps (`join`: their prefill is a forward of their own, whose cache then joins the batch's) and
    leave at once when they end or are let go (`drop`). Each row is a `Run` with its own decoder, so its drafter,
    knobs, token limit and views (alignment, Mask Lens: `Decoder(align=..., lens=...)`) are its own: the forward
    keeps every layer's states when any row records views, and each such row reads its own."""

    def __init__(self, lm: LM, planner: BatchPlanner | None = None, timed: bool = False):
        """`planner`: what sets the batch's widths (None: each row its own block); `timed`: time the forwards
        for drafters that learn from their forwards' time (a planner always has them)."""
        self.lm = lm
        self.planner = planner
        self.runs: list[Run] = []
        self.cache = None
        self.timer = ForwardTimer(lm.device) if timed or planner is not None else None

    @torch.inference_mode()
    def join(self, runs: list[Run], refill: bool = False) -> Iterator[tuple[Run, StepTrace]]:
        """Prefill `runs` (prompts of like length in one forward each), yielding (run, trace) per row; the rows
        still decoding then join the batch. `refill`: prompts wait to take a row's place (BatchPlanner.plan)."""
        for group in _prefill_groups(list(range(len(runs))), [len(run.pending) for run in runs]):
            here = [runs[i] for i in group]
            joining = self.lm.new_cache()
            yield from self._step(here, joining, refill)
            here = _still(here, joining)
            if here:
                self.cache = kvcache.append(self.cache, joining) if self.runs else joining
            self.runs += here

    @torch.inference_mode()
    def step(self, refill: bool = False) -> Iterator[tuple[Run, StepTrace]]:
        """One forward for every row, yielding (run, trace) per row in row order; rows that ended leave."""
        yield from self._step(self.runs, self.cache, refill)
        self.runs = _still(self.runs, self.cache)

    @torch.inference_mode()
    def drop(self, gone: list[Run]) -> None:
        """Let rows go between steps (their cache rows with them), whether or not they ended."""
        keep = [b for b, run in enumerate(self.runs) if run not in gone]
        if 0 < len(keep) < len(self.runs):
            kvcache.select_rows(self.cache, keep, max(self.runs[b].past for b in keep))
        self.runs = [self.runs[b] for b in keep]

    def _step(self, here: list[Run], cache, refill: bool) -> Iterator[tuple[Run, StepTrace]]:
        """One forward for the rows `here` (which hold `cache`'s rows in order): draft, feed, verify and commit
        each row, yielding (run, trace) per row."""
        lm, planner, timer = self.lm, self.planner, self.timer
        start = time.perf_counter()
        budgets = planner.plan([r.dec.drafter for r in here], [r.ctx for r in here], refill) if planner else None
        for b, run in enumerate(here):
            run.begin(None if budgets is None else budgets[b])
        prefill = any(run.lead for run in here)
        q = max(run.width for run in here)
        if planner is not None and not prefill:
            q = planner.rows(len(here), q)
        embeds, positions, mask = _inputs(lm, here, cache.get_seq_length(), q)
        for run in here:
            run.clock("forward")
        if timer is not None:
            timer.start()
        views = [run.dec.align or run.dec.lens for run in here]
        hidden, layers = lm.forward(embeds, positions, mask, cache, layers=any(views))
        logits, tops = _head(lm, hidden, here)
        timed = timer.stop(hidden.shape[0] * hidden.shape[1], keep=not prefill) if timer is not None else []
        kept: list[tuple[int, list[int]]] = []  # per batch row: (its committed slots, block rows to keep)
        emitted = []
        for b, (run, lg, top) in enumerate(zip(here, logits, tops)):
            mine = tuple(h[b, : run.width] for h in layers) if views[b] else None
            trace = run.finish(hidden[b, : run.width], mine, lg, timed, lambda past, keep: kept.append((past, keep)),
                               top)
            emitted.append(len(trace.emitted))
            yield run, trace
        kvcache.commit_rows(cache, kept, cache.get_seq_length() - hidden.shape[1])
        if planner is not None:
            planner.observe(None if budgets is None else budgets[0].rows, q, emitted, time.perf_counter() - start, timed)


def _inputs(lm: LM, runs: list[Run], slots: int, q: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, q, H) embeddings, (B, q) positions and the (B, 1, q, slots + q) additive mask, each row's
    block padded to q rows (padding rows see nothing and are never read); a row sees its first
    `run.past` slots, the tokens it has committed."""
    low = torch.finfo(lm.dtype).min
    embeds = torch.zeros(len(runs), q, lm.config.hidden_size, dtype=lm.dtype, device=lm.device)
    positions = torch.zeros(len(runs), q, dtype=torch.long, device=lm.device)
    mask = torch.full((len(runs), 1, q, slots + q), low, dtype=lm.dtype, device=lm.device)
    seen = torch.arange(slots, device=lm.device)[None, :] < torch.tensor([run.past for run in runs], device=lm.device)[:, None]
    mask[:, 0, :, :slots].masked_fill_(seen[:, None, :], 0.0)
    if q == 1 and all(run.width == 1 and not run.prop.k and run.prop.extra is None for run in runs):
        # A plain step (every row feeds its root alone): one embedding call and no per-row tensor work, as
        # batched greedy decoding does; a row's block is its root, seeing itself.
        embeds[:, 0] = lm.embed([run.pending[-1] for run in runs])
        positions[:, 0] = torch.tensor([run.root_pos for run in runs], device=lm.device)
        mask[:, 0, 0, slots] = 0.0
        return embeds, positions, mask
    for b, run in enumerate(runs):
        w = run.width
        embeds[b, :w] = run.embeds()
        positions[b, :w] = run.positions()
        block = lead_mask(run.lay, run.lead, lm.dtype, lm.device)[0, 0] if run.lead else run.lay.on(lm.device, lm.dtype)[0]
        mask[b, 0, :w, slots : slots + w] = block
    return embeds, positions, mask


def _head(lm: LM, hidden: torch.Tensor, runs: list[Run]) -> tuple[list[torch.Tensor], list[list[list[float]]]]:
    """Each row's logits from the root on (its `head_rows`), from one LM-head call for the batch, and their best ids
    and logits (`top_rows`), from one top-k and one host read for the batch: per row, a top-k and a read of its own
    cost more host time than batched greedy decoding's whole step does."""
    q = hidden.shape[1]
    if q == 1:  # a plain step: every row's one row
        logits = lm.head(hidden[:, 0])
        return list(logits.split(1)), [[row] for row in top_rows(logits)]
    idx = torch.cat([torch.arange(run.lead, run.lead + run.head_rows) + b * q for b, run in enumerate(runs)])
    logits = lm.head(hidden.reshape(-1, hidden.shape[-1])[idx.to(hidden.device)])
    sizes = [run.head_rows for run in runs]
    top = top_rows(logits)  # a hybrid's mask rows too: reading them costs less than gathering the nodes out
    return list(logits.split(sizes)), [top[a : a + run.lay.n_nodes]
                                       for a, run in zip(itertools.accumulate([0, *sizes]), runs)]


def _still(runs: list[Run], cache) -> list[Run]:
    """The runs still decoding; the cache keeps only their rows (cut to the longest)."""
    keep = [b for b, run in enumerate(runs) if not run.done]
    if 0 < len(keep) < len(runs):
        kvcache.select_rows(cache, keep, max(runs[b].past for b in keep))
    return [runs[b] for b in keep]


def _prefill_groups(new: list[int], lengths: list[int]) -> list[list[int]]:
    """The admitted prompts `new` (of `lengths` tokens) as prefill forwards: by length, a prompt joining the
    previous group while that group's padded rectangle stays within PREFILL_SLACK of its real tokens. A prompt's
    prefill is most of a batch's work, and a left-padded batch pays the longest prompt's length for every row
    (16 Spec-Bench questions of 40-789 tokens: 2,968 tokens, padded 12,624)."""
    groups: list[list[int]] = []
    sizes: list[int] = []
    for i, n in sorted(zip(new, lengths), key=lambda x: x[1]):
        if groups and n * (len(groups[-1]) + 1) <= PREFILL_SLACK * (sizes[-1] + n):
            groups[-1].append(i)
            sizes[-1] += n
        else:
            groups.append([i])
            sizes.append(n)
    return groups
