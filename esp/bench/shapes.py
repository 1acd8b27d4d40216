"""Published model shapes for random-weight stand-ins (esp.bench.overhead.random_lm): the bench's GPU checks need
no network and no weights. Each shape has a tiny twin of the same family, for a CPU check of the same code."""
from __future__ import annotations

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, max_position_embeddings=4096, vocab_size=1024)


def llama_1b(tiny: bool = False):
    """Llama-3.2-1B's shape (the lossless and batch checks' model), or its tiny twin."""
    from transformers import LlamaConfig

    if tiny:
        return LlamaConfig(**TINY)
    return LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                       num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
                       rms_norm_eps=1e-5, rope_parameters={**LLAMA3_ROPE, "factor": 32.0}, tie_word_embeddings=True)


def eight_b(tiny: bool = False) -> dict:
    """The paper's 8B shapes, Llama-3.1-8B and Qwen3-8B (from their config.json files), or tiny twins."""
    from transformers import LlamaConfig, Qwen3Config

    if tiny:
        return {"llama-3.1-8b": LlamaConfig(**TINY), "qwen3-8b": Qwen3Config(**TINY)}
    llama = LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_parameters={**LLAMA3_ROPE, "factor": 8.0}, bos_token_id=128000, eos_token_id=128009, tie_word_embeddings=False)
    qwen3 = Qwen3Config(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        bos_token_id=151643, eos_token_id=151645, tie_word_embeddings=False)
    return {"llama-3.1-8b": llama, "qwen3-8b": qwen3}


def summary(cfg) -> dict:
    """The fields of a shape a results file records."""
    keys = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim")
    return {k: getattr(cfg, k) for k in keys}
