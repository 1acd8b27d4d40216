"""ESP for transformers' `model.generate(..., custom_generate=REPO, trust_remote_code=True, method=SPEC)`.

The decoding runs in the installed ESP engine (the `esp` package of esp-explorer); this file maps
`generate()`'s arguments onto it: greedy, or with `do_sample=True` the engine's lossless sampling
(temperature, top_k, top_p; `seed` keys the draw, default drawn from torch's RNG), `max_new_tokens` /
`max_length`, `eos_token_id`, `return_dict_in_generate` (a GenerateDecoderOnlyOutput with `sequences`, and `speculative_decoding`: per row
the acceptance metrics under vLLM's per-request names, esp.trace.acceptance),
`streamer` (batch 1, as in transformers), and a left-padded batch with its `attention_mask` (decoded together,
one forward per step, each row as it would be alone). What ESP cannot reproduce exactly (right padding, beams,
logits processors, ...) is refused with one line. The output is exactly what `model.generate` would return
without `custom_generate`.
"""
import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

try:  # in a try block, so that transformers' import check leaves the message below to say what to install
    import esp
    from esp.errors import ESPError
    from esp.trace import acceptance
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("ESP's custom_generate runs the ESP engine, the esp package: install ESP Explorer with "
                      "`pip install git+<its repository URL>` (after torch; see this repo's README).") from e

DEFAULT_METHOD = "hybrid:bc=auto"
# Generation settings the engine does not implement, with the values under which they change nothing.
NEUTRAL = {
    "num_beams": (1,), "num_beam_groups": (1,), "num_return_sequences": (1,), "penalty_alpha": (),
    "repetition_penalty": (1.0,), "encoder_repetition_penalty": (1.0,), "no_repeat_ngram_size": (0,),
    "min_length": (0,), "min_new_tokens": (0,), "min_p": (), "typical_p": (1.0,), "epsilon_cutoff": (0.0,),
    "eta_cutoff": (0.0,), "top_h": (), "bad_words_ids": (), "force_words_ids": (), "constraints": (),
    "sequence_bias": (), "suppress_tokens": (), "begin_suppress_tokens": (), "forced_bos_token_id": (),
    "forced_eos_token_id": (), "guidance_scale": (1.0,), "watermarking_config": (), "stop_strings": (),
    "exponential_decay_length_penalty": (), "max_time": (), "prompt_lookup_num_tokens": (),
    "assistant_early_exit": (), "dola_layers": (), "output_scores": (False,), "output_logits": (False,),
    "output_attentions": (False,), "output_hidden_states": (False,), "renormalize_logits": (False,),
    "token_healing": (False,), "use_mtp": (False,),
}
# Arguments of generate() itself that ESP cannot honour unless left unset.
UNSUPPORTED_ARGS = ("logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn", "synced_gpus",
                    "assistant_model", "negative_prompt_ids", "negative_prompt_attention_mask")


def generate(model, inputs=None, generation_config=None, method=DEFAULT_METHOD, seed=None, streamer=None, **kwargs):
    """`model.generate` through ESP: each prompt (row) and its new tokens, laid out as `generate` lays them out."""
    for name in UNSUPPORTED_ARGS:
        if kwargs.pop(name, None):
            raise ESPError(f"ESP's custom_generate does not take {name}: leave it out.")
    tokenizer = kwargs.pop("tokenizer", None)
    ids, prompts = _input_ids(inputs, kwargs)
    config, model_kwargs = model._prepare_generation_config(generation_config, **kwargs)
    model_kwargs.pop("use_cache", None)
    if model_kwargs:
        raise ESPError(f"ESP's custom_generate does not take {', '.join(sorted(model_kwargs))}.")
    for key, ok in NEUTRAL.items():
        value = getattr(config, key, None)
        if value is not None and value not in ok:
            raise ESPError(f"ESP's custom_generate does not implement {key}={value!r}: leave it at its default.")
    n = config.max_new_tokens if config.max_new_tokens is not None else config.max_length - ids.shape[1]
    if n < 1:
        raise ESPError(f"The prompt has {ids.shape[1]} tokens, max_length {config.max_length}: nothing to generate "
                       "(set max_new_tokens).")
    eos = config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    options = dict(method=method, max_new_tokens=n, eos_token_id=eos)
    if config.do_sample:
        seed = int(torch.randint(0, 2**31 - 1, ())) if seed is None else seed
        options.update(temperature=config.temperature, top_p=config.top_p, top_k=config.top_k or 0, seed=seed)
    if streamer is not None:
        if not (callable(getattr(streamer, "put", None)) and callable(getattr(streamer, "end", None))):
            raise ESPError("streamer must have put() and end(), as transformers' streamers do.")
        if len(prompts) != 1:
            raise ESPError("A streamer takes one sequence (batch size 1), as in transformers' generate().")
        runs = [_streamed(model, tokenizer, ids, prompts[0], streamer, options)]
    elif len(prompts) == 1:
        runs = [esp.decode(model, tokenizer, prompts[0], **options).steps]
    else:
        runs = [r.steps for r in esp.decode(model, tokenizer, prompts, **options)]
    new = [[t for step in steps for t in step.emitted] for steps in runs]
    # generate() runs every row until the last one ends, writing pad_token_id (else the first EOS) after a row's end.
    pad = config.pad_token_id if config.pad_token_id is not None else (eos[0] if eos else 0)
    width = max(len(t) for t in new)
    tail = torch.tensor([t + [pad] * (width - len(t)) for t in new], dtype=ids.dtype, device=ids.device)
    sequences = torch.cat([ids, tail], 1)
    if not config.return_dict_in_generate:
        return sequences
    out = GenerateDecoderOnlyOutput(sequences=sequences)
    out["speculative_decoding"] = [acceptance(steps) for steps in runs]  # a key of its own: ModelOutput keeps both
    return out


def _streamed(model, tokenizer, ids, prompt, streamer, options) -> list:
    """Decode one prompt, calling `streamer` as generate() does: put(the prompt), put(each new token) in
    order, end(); returns the steps' traces."""
    steps = esp.stream(model, tokenizer, prompt, **options)  # bad input fails here, before the streamer hears anything
    streamer.put(ids.cpu())
    out = []
    try:
        for step in steps:
            for t in step.emitted:
                streamer.put(torch.tensor([t]))
            out.append(step)
    finally:
        streamer.end()  # a reader blocked on the streamer's queue (TextIteratorStreamer) is released even on an error
    return out


def _input_ids(inputs, kwargs: dict) -> tuple[torch.Tensor, list[list[int]]]:
    """The (B, n) input ids and each row's prompt without its left padding; right padding and embeddings
    are refused."""
    ids = kwargs.pop("input_ids", None) if inputs is None else inputs
    mask = kwargs.pop("attention_mask", None)
    if kwargs.get("inputs_embeds") is not None or not isinstance(ids, torch.Tensor) or ids.dim() != 2 or not ids.shape[0]:
        raise ESPError("ESP's custom_generate needs input_ids, a (batch, n) tensor of token ids.")
    if mask is not None:
        mask = torch.as_tensor(mask).bool()
        if mask.shape != ids.shape:
            raise ESPError(f"The attention mask's shape {tuple(mask.shape)} differs from input_ids' {tuple(ids.shape)}.")
        if not bool(mask[:, -1].all()):
            raise ESPError("The batch is padded on the right: ESP, like generate() for a decoder-only model, takes "
                           "left padding (tokenizer.padding_side = 'left').")
    return ids, esp.api.unpadded(ids, mask)
