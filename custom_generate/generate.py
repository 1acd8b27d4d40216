"""ESP for transformers' `model.generate(..., custom_generate=REPO, trust_remote_code=True, method=SPEC)`.

The decoding runs in the installed ESP engine (the `esp` package of esp-explorer); this file maps
`generate()`'s arguments onto it: greedy, or with `do_sample=True` the engine's lossless sampling
(temperature, top_k, top_p; `seed` keys the draw, default drawn from torch's RNG), `max_new_tokens` /
`max_length`, `eos_token_id`, and `return_dict_in_generate` (a GenerateDecoderOnlyOutput with `sequences`).
What ESP cannot reproduce exactly (batches, padding, beams, logits processors, streamers, ...) is refused
with one line. The output is exactly what `model.generate` would return without `custom_generate`.
"""
import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

try:  # in a try block, so that transformers' import check leaves the message below to say what to install
    import esp
    from esp.errors import ESPError
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
                    "assistant_model", "streamer", "negative_prompt_ids", "negative_prompt_attention_mask")


def generate(model, inputs=None, generation_config=None, method=DEFAULT_METHOD, seed=None, **kwargs):
    """`model.generate` through ESP: the prompt (batch 1) and the new tokens, as `generate` returns them."""
    for name in UNSUPPORTED_ARGS:
        if kwargs.pop(name, None):
            raise ESPError(f"ESP's custom_generate does not take {name}: leave it out.")
    tokenizer = kwargs.pop("tokenizer", None)
    ids = _input_ids(inputs, kwargs)
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
    sampling = {}
    if config.do_sample:
        seed = int(torch.randint(0, 2**31 - 1, ())) if seed is None else seed
        sampling = dict(temperature=config.temperature, top_p=config.top_p, top_k=config.top_k or 0, seed=seed)
    out = esp.decode(model, tokenizer, ids, method=method, max_new_tokens=n,
                     eos_token_id=[] if eos is None else eos, **sampling)
    sequences = torch.cat([ids, torch.tensor([out.tokens], dtype=ids.dtype, device=ids.device)], 1)
    return GenerateDecoderOnlyOutput(sequences=sequences) if config.return_dict_in_generate else sequences


def _input_ids(inputs, kwargs: dict) -> torch.Tensor:
    """The prompt as a (1, n) tensor; batches, padding and embeddings are refused."""
    ids = kwargs.pop("input_ids", None) if inputs is None else inputs
    mask = kwargs.pop("attention_mask", None)
    if kwargs.get("inputs_embeds") is not None or not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        raise ESPError("ESP's custom_generate needs input_ids, a (1, n) tensor of token ids.")
    if ids.shape[0] != 1:
        raise ESPError(f"ESP decodes one sequence at a time (batch size 1), not {ids.shape[0]}.")
    if mask is not None and not bool(mask.bool().all()):
        raise ESPError("The attention mask has padding: ESP decodes one unpadded sequence.")
    return ids
