"""ESP on a model you already hold: `decode` and `stream` wrap a Hugging Face causal LM and its tokenizer where
they are (any device, dtype or device map), without reloading or copying them."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import torch

from esp.decoding.batch import BatchDecoder
from esp.decoding.engine import Decoder, Generation
from esp.errors import ESPError
from esp.models.lm import LM, IdTokenizer
from esp.methods import REGISTRY, build, build_batch, parse
from esp.sampling import Sampling
from esp.trace import StepTrace

DEFAULT_METHOD = "hybrid:bc=auto"
# A tree step attends through a custom 4-D mask; these attention kernels take one.
MASKED_ATTENTION = ("sdpa", "eager")


@dataclass
class Result(Generation):
    """A finished run: `tokens` (new ones, EOS included when it ended the run), `text`, every step's trace,
    the `summary` (tau, forwards, seconds, ...), the prompt as fed, how the target chose its tokens, and the
    model's name (what `esp.show` titles the run with)."""

    prompt_ids: list[int]
    chat_template: bool  # whether a str prompt went through the tokenizer's chat template
    sampling: Sampling = Sampling()
    model: str = ""

    @property
    def widths(self) -> list[int]:
        """Block rows fed per forward (the prefill's block first; its prompt rows are not counted)."""
        return [len(s.row_labels) for s in self.steps]


def decode(model, tokenizer, prompt, method: str = DEFAULT_METHOD, max_new_tokens: int = 128,
           **options) -> Result | list[Result]:
    """Decode `prompt` (a str, or token ids: a list, a (1, n) tensor, or a tokenizer's output) with `method`
    (an engine spec such as "esp:k=2:bc=30", "pld" or "ar"); the output is exactly plain decoding's.

    A batch (a list of str, a list of id lists, a (B, n) tensor, or a padded tokenizer output with its
    attention mask) is decoded together, one forward per step, and gives one Result per prompt, in order;
    each row's tokens are what decoding that prompt alone gives. See `prepare` for the options."""
    dec, ids, chat = prepare(model, tokenizer, prompt, method, max_new_tokens, **options)
    if isinstance(dec, BatchDecoder):
        run = (dec.rows[0].sampling, dec.lm.name)
        return [Result(g.tokens, g.text, g.steps, g.summary, i, chat, *run) for g, i in zip(dec.generate(ids), ids)]
    g = dec.generate(ids)
    return Result(g.tokens, g.text, g.steps, g.summary, ids, chat, dec.sampling, dec.lm.name)


def stream(model, tokenizer, prompt, method: str = DEFAULT_METHOD, max_new_tokens: int = 128,
           **options) -> Iterator[StepTrace] | Iterator[tuple[int, StepTrace]]:
    """`decode`, one StepTrace per forward as it happens (`emitted` and `emitted_text` hold its new tokens);
    for a batch, (prompt index, StepTrace) per row of each forward. Bad input fails here, before the first step."""
    dec, ids, _ = prepare(model, tokenizer, prompt, method, max_new_tokens, **options)
    return dec.stream(ids)


def prepare(model, tokenizer, prompt, method: str = DEFAULT_METHOD, max_new_tokens: int = 128, *,
            chat_template: bool = True, temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
            seed: int = 0, eos_token_id: int | Iterable[int] | None = None, batch_size: int | None = None,
            views: bool = False, trace_mask: bool = False,
            **settings) -> tuple[Decoder | BatchDecoder, list[int] | list[list[int]], bool]:
    """A ready decoder (a BatchDecoder for a batch), the prompt's ids (one list per prompt for a batch), and
    whether the chat template was applied.

    A str prompt goes through the tokenizer's chat template, as one user turn with the generation prompt,
    when the tokenizer has one (`chat_template=False`: plain tokenization); ids are used as given.
    temperature 0 is greedy; above, the engine's lossless sampling (top_p, top_k, and `seed`, which keys
    the draw at each position). `eos_token_id`: None for the model's own, else the ids that end a run
    (empty: none). `settings` are the method's, as in its spec (k=2, bc="auto", ...); in a batch every
    prompt gets a drafter of its own, and `batch_size` caps the prompts decoded at once (the next one joins
    as a row ends; default: all of them). `views=True` records everything the explorer draws in each step's
    trace (the attention pattern, the alignment, the Mask Lens and the verifier's eye; in a batch, each row's as it
    would be alone); it costs some time (docs/BENCHMARKS.md), so it is off. `trace_mask=True` keeps only each step's attention pattern (the view `esp.show`
    draws; rows x rows booleans a step, kept for the whole run), in a batch too. Anything wrong raises ESPError
    with one line."""
    lm = wrap(model, tokenizer)
    spec = _spec(method, settings)
    sampling = Sampling(temperature, top_p, top_k, seed)
    batch, chat = prompt_batch(lm, prompt, chat_template)
    if eos_token_id is not None:
        lm.eos_ids = frozenset([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id)
    # No per-phase device syncs and, unless asked, no mask in the traces: a caller wants the tokens fast (bc=auto
    # still times its forwards, and the run's seconds are measured either way).
    if batch is not None:
        drafters, planner = build_batch(spec, len(batch))
        dec = BatchDecoder(lm, drafters, sampling, max_new_tokens, trace_mask=trace_mask or views, planner=planner,
                           batch_size=batch_size, views=views)
        for ids in batch:
            dec.check_prompt(ids)
        return dec, batch, chat
    ids, chat = prompt_ids(lm, prompt, chat_template)
    dec = Decoder(lm, build(spec), sampling, max_new_tokens, align=views, trace_mask=views or trace_mask,
                  timings=False, lens=views)
    dec.check_prompt(ids)
    return dec, ids, chat


def wrap(model, tokenizer=None) -> LM:
    """The engine's view of a loaded causal LM (put in eval mode: dropout would change its outputs); ESPError
    when the engine cannot drive it."""
    if not isinstance(model, torch.nn.Module) or not hasattr(model, "config"):
        raise ESPError(f"ESP needs a Hugging Face causal LM (a PreTrainedModel), not {type(model).__name__}.")
    name = type(model).__name__
    if getattr(model.config, "is_encoder_decoder", False):
        raise ESPError(f"{name} is an encoder-decoder model: ESP drafts with a decoder-only causal LM.")
    parts = [getattr(model, f, None) for f in ("get_input_embeddings", "get_output_embeddings", "get_decoder")]
    if not all(callable(p) for p in parts) or any(p() is None for p in parts):
        raise ESPError(f"{name} is not a causal LM with input embeddings, an LM head and a decoder "
                       "(load it with AutoModelForCausalLM).")
    attn = getattr(model.config, "_attn_implementation", None) or "sdpa"
    if attn not in MASKED_ATTENTION:
        raise ESPError(f"{name} runs {attn} attention, which cannot take ESP's tree mask: load it with "
                       "attn_implementation='sdpa' (or 'eager').")
    label = getattr(model.config, "name_or_path", "") or name
    return LM(model, tokenizer if tokenizer is not None else IdTokenizer(), label)


def prompt_ids(lm: LM, prompt, chat_template: bool = True) -> tuple[list[int], bool]:
    """The ids to feed and whether the chat template made them (see `prepare`)."""
    if isinstance(prompt, str):
        if isinstance(lm.tokenizer, IdTokenizer):
            raise ESPError("A text prompt needs the model's tokenizer: pass it, or pass token ids.")
        if not prompt.strip():  # a chat template would wrap it in tokens of its own
            raise ESPError("The prompt is empty: type some text first.")
        chat = bool(chat_template and getattr(lm.tokenizer, "chat_template", None))
        return (lm.chat_ids(prompt) if chat else list(lm.tokenizer(prompt)["input_ids"])), chat
    if isinstance(prompt, Mapping) and "input_ids" in prompt:  # a tokenizer's output
        return prompt_ids(lm, prompt["input_ids"], chat_template)
    rows = prompt if isinstance(prompt, torch.Tensor) else torch.tensor(prompt, dtype=torch.long) if _is_ids(prompt) else None
    if rows is None or rows.dtype.is_floating_point or rows.dtype == torch.bool or rows.dim() > 2:
        raise ESPError("The prompt must be a str or token ids (a list of ints, or a (1, n) tensor), or a list of them.")
    ids = rows.reshape(-1).tolist()
    if ids and not 0 <= min(ids) <= max(ids) < lm.vocab_size:
        raise ESPError(f"Token ids must lie in [0, {lm.vocab_size}) for this model.")
    return ids, False


def prompt_batch(lm: LM, prompt, chat_template: bool = True) -> tuple[list[list[int]] | None, bool]:
    """A batch's ids, one list per prompt, and whether the chat template made them; (None, False) when
    `prompt` is a single one (see `prompt_ids`). Padding is taken off each row by its attention mask."""
    if isinstance(prompt, Mapping) and "input_ids" in prompt:  # a tokenizer's output
        ids = torch.as_tensor(prompt["input_ids"])
        mask = prompt.get("attention_mask")
        if ids.dim() != 2 or (ids.shape[0] == 1 and (mask is None or bool(torch.as_tensor(mask).bool().all()))):
            return None, False
        return unpadded(ids, mask), False
    if isinstance(prompt, torch.Tensor):
        return (unpadded(prompt, None), False) if prompt.dim() == 2 and prompt.shape[0] > 1 else (None, False)
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(p, (str, list, tuple)) for p in prompt):
        rows = [prompt_ids(lm, p, chat_template) for p in prompt]
        return [r[0] for r in rows], any(r[1] for r in rows)
    return None, False


def unpadded(ids: torch.Tensor, mask) -> list[list[int]]:
    """Rows of a (B, n) id tensor without their padding: each row's mask must be one run of ones (left or
    right padding), else ESPError."""
    if ids.dtype.is_floating_point or ids.dtype == torch.bool:
        raise ESPError("The prompt must be token ids (integers).")
    mask = torch.ones_like(ids, dtype=torch.bool) if mask is None else torch.as_tensor(mask).bool()
    if mask.shape != ids.shape:
        raise ESPError(f"The attention mask's shape {tuple(mask.shape)} differs from the ids' {tuple(ids.shape)}.")
    out = []
    for b, (row, keep) in enumerate(zip(ids.tolist(), mask.tolist())):
        on = [i for i, k in enumerate(keep) if k]
        if not on or on[-1] - on[0] + 1 != len(on):
            raise ESPError(f"Row {b}'s attention mask {'is empty' if not on else 'has padding inside the prompt'}: "
                           "pad on one side only.")
        out.append(row[on[0] : on[-1] + 1])
    return out


def _is_ids(prompt) -> bool:
    """A list of ints (one prompt)."""
    return isinstance(prompt, (list, tuple)) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)


def _spec(method: str, settings: dict) -> str:
    """`method` with `settings` appended as spec pairs (so they are checked and converted like the spec's own)."""
    if not isinstance(method, str):
        raise ESPError(f"method must be a spec string such as {DEFAULT_METHOD!r}, not {type(method).__name__}.")
    name, _ = parse(method)
    unknown = sorted(set(settings) - set(REGISTRY[name].settings))
    if unknown:
        raise ESPError(f"{name}: unknown setting {unknown[0]!r} (settings: {', '.join(REGISTRY[name].settings) or 'none'}).")
    pairs = [f"{k}={','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}" for k, v in settings.items()]
    return ":".join([method.strip(), *pairs])
