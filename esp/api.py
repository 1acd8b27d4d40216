"""ESP on a model you already hold: `decode` and `stream` wrap a Hugging Face causal LM and its tokenizer where
they are (any device, dtype or device map), without reloading or copying them."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import torch

from .engine import Decoder, Generation
from .errors import ESPError
from .lm import LM
from .methods import REGISTRY, build, parse
from .overhead import IdTokenizer
from .sampling import Sampling
from .trace import StepTrace

DEFAULT_METHOD = "hybrid:bc=auto"
# A tree step attends through a custom 4-D mask; these attention kernels take one.
MASKED_ATTENTION = ("sdpa", "eager")


@dataclass
class Result(Generation):
    """A finished run: `tokens` (new ones, EOS included when it ended the run), `text`, every step's trace,
    the `summary` (tau, forwards, seconds, ...), and the prompt as fed."""

    prompt_ids: list[int]
    chat_template: bool  # whether a str prompt went through the tokenizer's chat template

    @property
    def widths(self) -> list[int]:
        """Block rows fed per forward (the prefill's block first; its prompt rows are not counted)."""
        return [len(s.row_labels) for s in self.steps]


def decode(model, tokenizer, prompt, method: str = DEFAULT_METHOD, max_new_tokens: int = 128, **options) -> Result:
    """Decode `prompt` (a str, or token ids: a list, a (1, n) tensor, or a tokenizer's output) with `method`
    (an engine spec such as "esp:k=2:bc=30", "pld" or "ar"); the output is exactly plain decoding's. See
    `prepare` for the options."""
    dec, ids, chat = prepare(model, tokenizer, prompt, method, max_new_tokens, **options)
    g = dec.generate(ids)
    return Result(g.tokens, g.text, g.steps, g.summary, ids, chat)


def stream(model, tokenizer, prompt, method: str = DEFAULT_METHOD, max_new_tokens: int = 128,
           **options) -> Iterator[StepTrace]:
    """`decode`, one StepTrace per forward as it happens (`emitted` and `emitted_text` hold its new tokens).
    Bad input fails here, before the first step."""
    dec, ids, _ = prepare(model, tokenizer, prompt, method, max_new_tokens, **options)
    return dec.stream(ids)


def prepare(model, tokenizer, prompt, method: str = DEFAULT_METHOD, max_new_tokens: int = 128, *,
            chat_template: bool = True, temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
            seed: int = 0, eos_token_id: int | Iterable[int] | None = None,
            **settings) -> tuple[Decoder, list[int], bool]:
    """A ready decoder, the prompt's ids, and whether the chat template was applied.

    A str prompt goes through the tokenizer's chat template, as one user turn with the generation prompt,
    when the tokenizer has one (`chat_template=False`: plain tokenization); ids are used as given.
    temperature 0 is greedy; above, the engine's lossless sampling (top_p, top_k, and `seed`, which keys
    the draw at each position). `eos_token_id`: None for the model's own, else the ids that end a run
    (empty: none). `settings` are the method's, as in its spec (k=2, bc="auto", ...). Anything wrong raises
    ESPError with one line."""
    lm = wrap(model, tokenizer)
    drafter = build(_spec(method, settings))
    sampling = Sampling(temperature, top_p, top_k, seed)
    ids, chat = prompt_ids(lm, prompt, chat_template)
    if eos_token_id is not None:
        lm.eos_ids = frozenset([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id)
    # No per-phase device syncs and no mask in the traces: a caller wants the tokens fast (bc=auto still
    # times its forwards, and the run's seconds are measured either way).
    dec = Decoder(lm, drafter, sampling, max_new_tokens, trace_mask=False, timings=False)
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
        mask = prompt.get("attention_mask")
        if mask is not None and not bool(torch.as_tensor(mask).bool().all()):
            raise ESPError("The attention mask has padding: ESP decodes one unpadded sequence; pass its ids alone.")
        return prompt_ids(lm, prompt["input_ids"], chat_template)
    rows = prompt if isinstance(prompt, torch.Tensor) else torch.tensor(prompt, dtype=torch.long) if _is_ids(prompt) else None
    if rows is None or rows.dtype.is_floating_point or rows.dtype == torch.bool or rows.dim() > 2:
        raise ESPError("The prompt must be a str or token ids (a list of ints, or a (1, n) tensor).")
    if rows.dim() == 2 and rows.shape[0] != 1:
        raise ESPError(f"ESP decodes one sequence at a time (batch size 1), not {rows.shape[0]}.")
    ids = rows.reshape(-1).tolist()
    if ids and not 0 <= min(ids) <= max(ids) < lm.vocab_size:
        raise ESPError(f"Token ids must lie in [0, {lm.vocab_size}) for this model.")
    return ids, False


def _is_ids(prompt) -> bool:
    """A list of ints, or a list of such lists (a batch; refused later unless it holds one row)."""
    if not isinstance(prompt, (list, tuple)):
        return False
    rows = prompt if prompt and isinstance(prompt[0], (list, tuple)) else [prompt]
    return all(isinstance(t, int) and not isinstance(t, bool) for r in rows for t in r) and len({len(r) for r in rows}) <= 1


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
