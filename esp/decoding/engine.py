"""The decoding loop shared by every method: propose -> one forward -> verify -> commit -> trace."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from esp.decoding.drafter import Budget, Context, Drafter, Forward, StepResult
from esp.decoding.layout import Layout, make_layouts
from esp.decoding.lens import MaskLens, eye
from esp.decoding.steptrace import step_trace
from esp.decoding.timer import ForwardTimer, Phases
from esp.decoding.verify import check
from esp.errors import ESPError
from esp.models.kvcache import commit
from esp.models.lm import LM
from esp.sampling import Sampling
from esp.trace import RunSummary, StepTrace, summarize


@dataclass
class Generation:
    """A finished run: the tokens, their text, every step's trace and the summary."""

    tokens: list[int]
    text: str
    steps: list[StepTrace]
    summary: RunSummary


def check_vocab(ids: list[int], vocab_size: int) -> None:
    """Refuse token ids outside the model's vocabulary with one sentence (on CUDA an out-of-range id is a
    device-side assert that breaks the process's CUDA state for every later call)."""
    bad = next((t for t in ids if not (isinstance(t, int) and 0 <= t < vocab_size)), None)
    if bad is not None:
        raise ESPError(f"Token id {bad!r} is outside this model's vocabulary (ids 0 to {vocab_size - 1}).")


class Decoder:
    """Runs one drafter through the shared tree / mask / cache / verify machinery."""

    def __init__(
        self,
        lm: LM,
        drafter: Drafter | None = None,
        sampling: Sampling = Sampling(),
        max_new_tokens: int = 128,
        layouts: str = "efficient",
        align: bool = False,
        trace_mask: bool = True,
        timings: bool = True,
        lens: bool = False,
    ):
        """`timings=False` keeps the device asynchronous within a step: the trace's phase times are then
        only when the host queued the work (exact on a CPU), and `generate` still times the whole run.
        `lens=True` records the verifier's eye and the Mask Lens in every trace (esp.decoding.lens), from the
        same forward (which then keeps every layer's states): the explorer's views; off, a step does none of it."""
        if not (isinstance(max_new_tokens, int) and max_new_tokens >= 1):
            raise ESPError(f"max new tokens must be a positive integer, not {max_new_tokens}.")
        self.lm = lm
        self.drafter = drafter or Drafter()
        self.sampling = sampling
        self.max_new_tokens = max_new_tokens
        self.layouts = make_layouts(layouts)
        self.align = align
        self.trace_mask = trace_mask
        self.timings = timings
        self.lens = lens
        # A drafter that learns from its forwards' measured time (bc=auto) gets them without step timings,
        # from a timer that does not block the device (Forward.timed).
        self.time_forward = not timings and self.drafter.times_forward

    def check_prompt(self, prompt_ids: list[int]) -> None:
        """Reject prompts the model cannot take, with one clear sentence."""
        if not prompt_ids:
            raise ESPError("The prompt is empty: type some text first.")
        check_vocab(prompt_ids, self.lm.vocab_size)
        room = self.lm.max_context - self.max_new_tokens - 64
        if len(prompt_ids) > room:
            raise ESPError(
                f"The prompt is {len(prompt_ids)} tokens, but this model's context "
                f"({self.lm.max_context}) leaves room for at most {max(room, 0)} with "
                f"{self.max_new_tokens} new tokens: shorten it or ask for fewer tokens."
            )

    @torch.inference_mode()
    def stream(self, prompt_ids: list[int], n_prompt: int | None = None) -> Iterator[StepTrace]:
        """Decode, yielding one trace per target forward (the prefill first).

        `n_prompt` < len(prompt_ids) resumes a run: the ids after the first `n_prompt` are output already
        committed (drafters catch up on it, e.g. ESP's EMA), and only new tokens count towards the limit.
        """
        run = Run(self, prompt_ids, n_prompt)
        lm = self.lm
        cache = lm.new_cache()
        timer = ForwardTimer(lm.device) if self.time_forward else None
        while True:
            run.begin()
            lay, lead = run.lay, run.lead
            # A one-row step (plain decoding, or a step the drafter held to one row) sees the whole cache: no mask,
            # so that it runs exactly as the model's own generate() runs it (esp.models.lm.LM.forward).
            mask = (lead_mask(lay, lead, lm.dtype, lm.device) if lead
                    else None if lay.size == 1 else self.layouts.additive(lay, run.past, lm.dtype, lm.device))
            positions, embeds = run.positions(), run.embeds()
            run.clock("forward")
            if timer is not None:
                timer.start()
            hidden, layers = lm.forward(embeds, positions, mask, cache, layers=self.align or self.lens,
                                        max_pos=run.root_pos + lay.max_offset)
            logits = lm.head(hidden[lead : lead + run.head_rows])
            timed = timer.stop(lay.size, keep=not lead) if timer is not None else []
            yield run.finish(hidden, layers, logits, timed, lambda past, rows: commit(cache, past, rows))
            if run.done:
                return

    def generate(self, prompt_ids: list[int]) -> Generation:
        """Run to the end and return tokens, text, traces and summary."""
        clock = Phases(self.lm.device)  # one device sync at each end, whatever `timings` says
        start = clock.now()
        steps = list(self.stream(prompt_ids))
        seconds = clock.now() - start
        tokens = [t for s in steps for t in s.emitted]
        text = self.lm.tokenizer.decode(tokens, skip_special_tokens=True)
        return Generation(tokens, text, steps, summarize(self.drafter.name, steps, seconds))



class Run:
    """One prompt's decoding state across steps: what it feeds next, and what it makes of each forward.

    The one-row loop (`Decoder.stream`) and the batch loop (`esp.decoding.batch`) drive it alike: `begin`
    drafts the step's block, the loop runs the forward, `finish` verifies, commits, lets the drafter learn
    and traces the step. It reads the decoder's settings only (its public attributes)."""

    def __init__(self, dec: Decoder, prompt_ids: list[int], n_prompt: int | None = None, batched: bool = False):
        dec.check_prompt(prompt_ids)
        self.dec = dec
        n_prompt = len(prompt_ids) if n_prompt is None else n_prompt
        self.ctx = Context(lm=dec.lm, tokens=list(prompt_ids), n_prompt=n_prompt, sampling=dec.sampling,
                           align=dec.align, batched=batched)
        dec.drafter.start(self.ctx)
        self.pending = list(prompt_ids)  # tokens fed this step before the tree: the prompt, then one token
        self.past = self.produced = 0  # tokens committed to the cache, new tokens emitted
        self.done = False
        self.lens = MaskLens(dec.lm) if dec.lens else None

    def begin(self, budget: Budget | None = None) -> None:
        """Draft this step's block (`budget`: what a batch budget gave this row, else the drafter chooses)."""
        dec = self.dec
        self.clock = clock = Phases(dec.lm.device, dec.timings)
        clock("draft")
        self.ctx.budget = budget
        self.prop = prop = dec.drafter.propose(self.ctx)
        clock("mask")
        self.lay = dec.layouts.layout(prop.tree.parents, prop.k, prop.extra, prop.masked)
        self.lead = len(self.pending) - 1  # rows before the root (the prompt at prefill, none afterwards)
        self.root_pos = self.past + self.lead

    @property
    def width(self) -> int:
        """Rows this step feeds: the lead (prompt rows before the root) and the block."""
        return self.lead + self.lay.size

    @property
    def head_rows(self) -> int:
        """Block rows whose logits the step needs (from the root on)."""
        return self.lay.size if self.prop.head_all else self.lay.n_nodes

    def positions(self) -> torch.Tensor:
        lm = self.dec.lm
        offsets = self.lay.on(lm.device, lm.dtype)[1]
        if not self.lead:
            return self.root_pos + offsets
        return torch.cat([torch.arange(self.past, self.root_pos, device=lm.device), self.root_pos + offsets])

    def embeds(self) -> torch.Tensor:
        """Input embeddings of the fed rows: the pending tokens and the tree's nodes, the masks, the extra rows."""
        lm, prop = self.dec.lm, self.prop
        parts = [lm.embed(self.pending + prop.tree.tokens[1:])]
        if prop.k:
            parts.append(prop.mask_embeds.to(lm.dtype).repeat(len(self.lay.owners), 1))
        if prop.extra is not None:
            parts.append(lm.embed(list(prop.extra.ids)))
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def finish(self, hidden: torch.Tensor, layers, logits: torch.Tensor, timed: list,
               commit: Callable[[int, list[int]], None], top: list[list[float]] | None = None) -> StepTrace:
        """Verify the step from its forward: `hidden` (this run's fed rows), `logits` (its `head_rows`
        from the root), `timed` forwards; `commit(past, rows)` keeps the accepted rows in the cache; `top`:
        the node rows' best ids and logits (`verify.top_rows`) when the caller read them already."""
        dec, ctx, clock, lead = self.dec, self.ctx, self.clock, self.lead
        clock("verify")
        forward = self._forward(hidden, layers, logits, timed)
        res, top2 = self._verify(logits[: self.lay.n_nodes], forward, commit, top)
        read = None
        if self.lens is not None:
            with clock.within("trace"):
                read = self.lens.read(res.layout, res.path, forward.layers)
            if read is not None:
                forward.read = read[0], read[1][-1]  # the masks' own logits: the lens's output layer
        notes = dec.drafter.observe(ctx, res)
        clock("trace")
        self.produced += len(res.emitted)
        self.done = self.produced >= dec.max_new_tokens or any(t in dec.lm.eos_ids for t in res.emitted)
        trace = step_trace(dec.lm, dec.drafter, res, step=ctx.step, past=self.past, notes=notes, prefill=lead > 0,
                           top2=top2[: len(res.emitted)], trace_mask=dec.trace_mask)
        if self.lens is not None:
            self._look(trace, res, read)
        trace.timings = clock.done()
        self.past += lead + len(res.path)
        self.pending = [res.bonus]
        ctx.step += 1
        return trace

    def _forward(self, hidden: torch.Tensor, layers, logits: torch.Tensor, timed: list) -> Forward:
        """The forward's outputs over the block (the lead's rows apart), as the drafter reads them."""
        lead, seconds = self.lead, self.clock.seconds["forward"]  # the forward and its head call: a cost point
        if self.dec.timings and not lead:
            timed = [(self.lay.size, seconds)]
        return Forward(hidden=hidden[lead:], layers=None if layers is None else tuple(h[lead:] for h in layers),
                       prefix_layers=None if layers is None or not lead else tuple(h[:lead] for h in layers),
                       block_logits=logits if self.prop.head_all else None, seconds=seconds, clock=self.clock,
                       timed=timed)

    def _verify(self, node_logits: torch.Tensor, forward: Forward, commit: Callable[[int, list[int]], None],
                top: list[list[float]] | None) -> tuple[StepResult, list[list]]:
        """Check the tree, commit the accepted rows and extend the text with what the step emits: the drafter's
        step record, and the verifier's ranked rows along the path (StepTrace.top2)."""
        clock, tree = self.clock, self.prop.tree
        v = check(tree, node_logits, self.root_pos, self.dec.sampling, top)
        clock("commit")
        commit(self.past, list(range(self.lead)) + [self.lead + i for i in v.path])
        clock("draft")
        emitted = self._cut([tree.tokens[i] for i in v.path[1:]] + [v.bonus])
        self.ctx.tokens.extend(emitted)
        return StepResult(proposal=self.prop, layout=self.lay, root_pos=self.root_pos, node_logits=node_logits,
                          path=v.path, bonus=v.bonus, choices=v.choices, emitted=emitted, forward=forward,
                          ranked=v.rows), v.top2

    def _cut(self, tokens: list[int]) -> list[int]:
        """`tokens` up to the run's token limit and its first end-of-sequence token (kept)."""
        out = []
        for t in tokens[: self.dec.max_new_tokens - self.produced]:
            out.append(t)
            if t in self.dec.lm.eos_ids:
                break
        return out

    def _look(self, trace: StepTrace, res: StepResult, read: tuple[list[int], torch.Tensor] | None) -> None:
        """The verifier's eye and the Mask Lens (`read`: the lens logits of the masks at the path's end), into
        the step's trace (lens on)."""
        seen = eye(res.proposal.tree, res.node_logits, res.path, self.dec.sampling)
        trace.eye = seen.rows[: len(res.emitted)]
        for node, rank, p in zip(trace.nodes[1:], seen.ranks, seen.probs):
            node.target_rank, node.target_p = rank, p
        trace.lens, trace.lens_real = self.lens.step(self.ctx.step, res.root_pos, res.layout, res.path, read,
                                                     res.emitted, trace.emitted_text)


def lead_mask(lay: Layout, lead: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Prefill mask: `lead` prompt rows causal among themselves, then the block, which sees them all."""
    q = lead + lay.size
    low = torch.finfo(dtype).min
    out = torch.full((q, q), low, dtype=dtype, device=device)
    out[:lead, :lead] = torch.full((lead, lead), low, dtype=dtype, device=device).triu(1)
    out[lead:, :lead] = 0
    out[lead:, lead:] = lay.on(device, dtype)[0]
    return out[None, None]
