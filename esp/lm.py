"""The one place that touches a Hugging Face causal LM: embeddings, a block forward, the LM head."""
from __future__ import annotations

import time

import torch
from transformers import DynamicCache


class LM:
    """A frozen causal LM and its tokenizer, with the three calls the engine needs."""

    def __init__(self, model, tokenizer, name: str):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.config = model.config.get_text_config(decoder=True)
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self._embed = model.get_input_embeddings()
        self._head = model.get_output_embeddings()
        self._decoder = model.get_decoder()
        self._softcap = getattr(self.config, "final_logit_softcapping", None)
        types = getattr(self.config, "layer_types", None)
        self._layer_types = sorted(set(types)) if types else None
        self._window = getattr(self.config, "sliding_window", None)
        self.max_context = int(getattr(self.config, "max_position_embeddings", 0) or 2**31)
        eos = model.generation_config.eos_token_id if model.generation_config else None
        eos = tokenizer.eos_token_id if eos is None else eos
        self.eos_ids = frozenset(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
        self._texts: dict[int, str] = {}
        self.head_seconds = 0.0  # time spent in `head`, so callers can count it as model time

    @property
    def vocab_size(self) -> int:
        return self._head.weight.shape[0]

    def new_cache(self) -> DynamicCache:
        # No config: every layer keeps all its keys, so accepted paths can be gathered by position;
        # sliding-window layers get their window through the mask instead (see `forward`).
        return DynamicCache()

    @torch.inference_mode()
    def embed(self, ids: list[int] | torch.Tensor) -> torch.Tensor:
        """(q, H) input embeddings, model-specific scaling included."""
        ids = torch.as_tensor(ids, device=self.device).view(1, -1)
        return self._embed(ids)[0]

    @torch.inference_mode()
    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits for post-norm hidden rows, in float32 (float64 for float64 models)."""
        t = time.perf_counter()
        logits = self._head(hidden)
        if self._softcap:
            logits = torch.tanh(logits / self._softcap) * self._softcap
        logits = logits if logits.dtype == torch.float64 else logits.float()
        if logits.is_cuda:
            torch.cuda.synchronize()
        self.head_seconds += time.perf_counter() - t
        return logits

    @torch.inference_mode()
    def forward(
        self,
        embeds: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        cache: DynamicCache,
        layers: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None]:
        """One forward over a block. `mask` is (1, 1, q, past + q) additive; returns post-norm hidden
        rows (q, H) and, if asked, every layer's hidden states (embeddings first, post-norm last)."""
        pos = positions.view(1, -1)
        attn = mask
        if self._layer_types:
            attn = {t: self._windowed(mask, pos[0]) if t == "sliding_attention" else mask for t in self._layer_types}
        out = self._decoder(
            inputs_embeds=embeds[None],
            attention_mask=attn,
            position_ids=pos,
            cache=cache,
            use_cache=True,
            output_hidden_states=layers,
        )
        hs = tuple(h[0] for h in out.hidden_states) if layers else None
        return out.last_hidden_state[0], hs

    def _windowed(self, mask: torch.Tensor, qpos: torch.Tensor) -> torch.Tensor:
        if not self._window or int(qpos.max()) < self._window:
            return mask
        past = mask.shape[-1] - qpos.numel()
        kpos = torch.cat([torch.arange(past, device=qpos.device), qpos])
        far = (qpos[:, None] - kpos[None, :]) >= self._window
        return mask.masked_fill(far, torch.finfo(mask.dtype).min)

    def text(self, token: int) -> str:
        """Decoded text of one token (memoised)."""
        t = self._texts.get(token)
        if t is None:
            t = self._texts[token] = self.tokenizer.decode([token])
        return t

    def chat_ids(self, prompt: str) -> list[int]:
        """The prompt as one user turn in the model's chat template, with the generation prompt."""
        if getattr(self.tokenizer, "chat_template", None):
            enc = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
            )
            ids = enc["input_ids"] if isinstance(enc, dict) or hasattr(enc, "keys") else enc
            return list(ids)
        return self.tokenizer(prompt)["input_ids"]
