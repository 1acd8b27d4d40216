"""The one place that touches a Hugging Face causal LM: embeddings, a block forward, the LM head."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from esp.device import to_device
from esp.models.packed import PackedLinear, packing_op
from esp.errors import ESPError


@dataclass(frozen=True, kw_only=True)
class Modules:
    """The parts of the model the engine calls."""

    embed: torch.nn.Module
    head: torch.nn.Module
    decoder: torch.nn.Module
    norm: torch.nn.Module | None  # the final norm, read by the Mask Lens


@dataclass(frozen=True, kw_only=True)
class Quirks:
    """What a forward does differently per architecture (from the model's config)."""

    softcap: float | None  # final logit soft-capping (Gemma 2)
    layer_types: list[str] | None  # the attention kinds of its layers, when they differ (sliding / full)
    window: int | None  # the sliding window, for the layers that have one


class LM:
    """A frozen causal LM and its tokenizer, with the three calls the engine needs."""

    def __init__(self, model, tokenizer, name: str):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.config = model.config.get_text_config(decoder=True)
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        decoder = model.get_decoder()
        self._modules = Modules(embed=model.get_input_embeddings(), head=model.get_output_embeddings(),
                                decoder=decoder, norm=getattr(decoder, "norm", None))
        types = getattr(self.config, "layer_types", None)
        self._quirks = Quirks(softcap=getattr(self.config, "final_logit_softcapping", None),
                              layer_types=sorted(set(types)) if types else None,
                              window=getattr(self.config, "sliding_window", None))
        self.max_context = int(getattr(self.config, "max_position_embeddings", 0) or 2**31)
        eos = model.generation_config.eos_token_id if model.generation_config else None
        eos = tokenizer.eos_token_id if eos is None else eos
        self.eos_ids = frozenset(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
        self._texts: dict[int, str] = {}
        self.head_calls = 0  # LM-head calls so far (tests check that a step makes only the ones it needs)

    @property
    def packed(self) -> bool:
        """Whether its linear layers run on oneDNN's packed weights (esp.models.cpu_kernels packs all or none):
        another cost curve than the dense layers'."""
        return isinstance(self._modules.head, PackedLinear) and self._modules.head.packed is not None

    @property
    def vocab_size(self) -> int:
        head = self._modules.head
        return head.out_features if isinstance(head, torch.nn.Linear) else head.weight.shape[0]

    def new_cache(self) -> DynamicCache:
        # No config: every layer keeps all its keys, so accepted paths can be gathered by position;
        # sliding-window layers get their window through the mask instead (see `forward`).
        return DynamicCache()

    @torch.inference_mode()
    def embed(self, ids: list[int] | torch.Tensor) -> torch.Tensor:
        """(q, H) input embeddings, model-specific scaling included."""
        ids = ids.to(self.device) if isinstance(ids, torch.Tensor) else to_device(ids, self.device)
        return self._modules.embed(ids.view(1, -1))[0]

    @torch.inference_mode()
    def head(self, hidden: torch.Tensor, views: bool = False) -> torch.Tensor:
        """Logits for post-norm hidden rows, in float32 (float64 for float64 models). `views`: rows that only
        inform what a step shows and drafts (never the verifier's rows), read through oneDNN's float32 matmul
        where this torch has it and the head is not packed already (`_onednn_linear`): the same logits up to float
        rounding, and on AVX-512 AMD CPUs several times faster than MKL's, which the verifier's rows of a dense
        model keep so that they stay as the model's own forward makes them."""
        self.head_calls += 1
        module = self._modules.head
        fast = views and _plain_linear(module) and _onednn_ready(hidden, module.weight)
        logits = _onednn_linear(hidden, module.weight) if fast else module(hidden)
        cap = self._quirks.softcap
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits if logits.dtype == torch.float64 else logits.float()

    @torch.inference_mode()
    def final_norm(self, hidden: torch.Tensor) -> torch.Tensor:
        """The model's final norm over residual rows (what the last layer's output gets before the LM head)."""
        if self._modules.norm is None:
            raise ESPError(f"{self.name} has no final norm (decoder.norm) for the lens to read layers through.")
        return self._modules.norm(hidden)

    @torch.inference_mode()
    def forward(
        self,
        embeds: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor | None,
        cache: DynamicCache,
        layers: bool = False,
        max_pos: int | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """One forward over a block. `mask` is (1, 1, q, past + q) additive, or None for one row that sees
        every cached token (a plain decoding step: the model then runs it as its own `generate()` does, with
        the same attention kernel and so the same logits, and faster than through an additive mask); returns
        post-norm hidden rows (q, H) and, if asked, every layer's hidden states (embeddings first, post-norm last).
        A batch: (B, q, H) embeddings, (B, q) positions and a (B, 1, q, past + q) mask give (B, q, H).
        `max_pos`, the largest of `positions` when the caller knows it, spares a device read."""
        batched = embeds.dim() == 3
        pos = positions if batched else positions.view(1, -1)
        attn = mask
        quirks = self._quirks
        if quirks.layer_types:
            top = int(pos.max()) if max_pos is None and quirks.window else max_pos
            attn = {t: self._windowed(mask, pos, top, cache) if t == "sliding_attention" else mask
                    for t in quirks.layer_types}
        out = self._modules.decoder(
            inputs_embeds=embeds if batched else embeds[None],
            attention_mask=attn,
            position_ids=pos,
            cache=cache,
            use_cache=True,
            output_hidden_states=layers,
        )
        if batched:
            return out.last_hidden_state, out.hidden_states if layers else None
        hs = tuple(h[0] for h in out.hidden_states) if layers else None
        return out.last_hidden_state[0], hs

    def _windowed(self, mask: torch.Tensor | None, qpos: torch.Tensor, top: int | None,
                  cache: DynamicCache) -> torch.Tensor | None:
        """`mask` (None: every cached key visible) with keys a window or more behind each query blocked; `qpos` is
        (B, q). A row's cached slot j holds its position j (both loops keep each row's tokens in order from slot 0)."""
        window = self._quirks.window
        if not window or top < window:
            return mask
        if mask is None:
            mask = torch.zeros(qpos.shape[0], 1, qpos.shape[1], cache.get_seq_length() + qpos.shape[1],
                               dtype=self.dtype, device=self.device)
        past = mask.shape[-1] - qpos.shape[-1]
        kpos = torch.cat([torch.arange(past, device=qpos.device).expand(qpos.shape[0], -1), qpos], 1)
        far = (qpos[:, :, None] - kpos[:, None, :]) >= window
        return mask.masked_fill(far[:, None], torch.finfo(mask.dtype).min)

    def text(self, token: int) -> str:
        """Decoded text of one token (memoised)."""
        t = self._texts.get(token)
        if t is None:
            t = self._texts[token] = self.tokenizer.decode([token])
        return t

    def texts(self, tokens: set[int]) -> dict[int, str]:
        """`text` of each of `tokens`, those not seen yet decoded in one batch call."""
        new = [t for t in tokens if t not in self._texts]
        if new and hasattr(self.tokenizer, "batch_decode"):
            self._texts.update(zip(new, self.tokenizer.batch_decode([[t] for t in new])))
        return {t: self.text(t) for t in tokens}

    def chat_ids(self, prompt: str) -> list[int]:
        """The prompt as one user turn in the model's chat template, with the generation prompt."""
        return self.conversation_ids([{"role": "user", "content": prompt}])

    def conversation_ids(self, messages: list[dict]) -> list[int]:
        """A conversation (`{"role", "content"}` messages, the last a user turn) in the model's chat
        template, with the generation prompt; without a template, the messages' texts one after another."""
        template = getattr(self.tokenizer, "chat_template", None)
        if template:
            # Qwen3-style templates think first unless told not to: a benchmark's tokens would be <think> text.
            extra = {"enable_thinking": False} if "enable_thinking" in str(template) else {}
            enc = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **extra)
            ids = enc["input_ids"] if isinstance(enc, dict) or hasattr(enc, "keys") else enc
            return list(ids)
        return self.tokenizer("\n\n".join(m["content"] for m in messages))["input_ids"]


def _plain_linear(module: torch.nn.Module) -> bool:
    return type(module) is torch.nn.Linear and module.bias is None


def _onednn_ready(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `x @ weight.T` can go through oneDNN's float32 linear here: CPU float32 tensors and a torch whose
    oneDNN linear answers as F.linear does (`packing_op`)."""
    if x.device.type != "cpu" or x.dtype != torch.float32 or weight.dtype != torch.float32:
        return False
    return packing_op() is not None


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`x @ weight.T` over the last dimension through oneDNN (the weight as it is, no packed copy)."""
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    return packing_op()[1](flat, weight, None, "none", [], "").view(*x.shape[:-1], -1)


class IdTokenizer:
    """Enough of a tokenizer for random-weight models: ids are their own text, and nothing ends a run."""

    eos_token_id = None
    chat_template = None

    def decode(self, ids, **_) -> str:
        return " ".join(str(i) for i in ids)

    def __call__(self, text: str) -> dict:
        return {"input_ids": [int(x) for x in text.split()]}
