"""Device policy (dtype per device, capability and model family; dtype="auto" on a CPU), Qwen3's chat prompts, and the step timer."""
from __future__ import annotations

import argparse
import json
from types import SimpleNamespace

import pytest
import torch

import esp.models.cpu_dtype as cpu_dtype
from esp.errors import ESPError
from esp.models.lm import LM
from esp.models.lm import IdTokenizer
from esp.models.loader import dtype_policy
import esp.decoding.timer as timer
from esp.decoding.timer import Phases


@pytest.mark.parametrize("device,cap,family,want", [
    ("cpu", None, "llama", torch.float32),
    ("cpu", None, "gemma3_text", torch.float32),
    ("cuda", (9, 0), "llama", torch.bfloat16),  # H100 / H200
    ("cuda", (8, 0), "qwen3", torch.bfloat16),  # A100: the first with bf16 tensor cores
    ("cuda", (8, 6), "gemma3_text", torch.bfloat16),  # A10G: bf16 keeps Gemma in range
    ("cuda", (7, 5), "llama", torch.float16),  # T4
    ("cuda", (7, 5), "qwen2", torch.float16),
    ("cuda", (7, 5), "gemma3_text", torch.float32),  # Gemma overflows float16
    ("cuda", (7, 0), "gemma2", torch.float32),
    ("cuda", (6, 1), None, torch.float16),
])
def test_dtype_policy(device, cap, family, want):
    assert dtype_policy(device, cap, family) == want


def test_an_explicit_dtype_overrides_the_policy_and_a_bad_one_is_one_line():
    assert dtype_policy("cpu", None, "llama", "bfloat16") == torch.bfloat16
    assert dtype_policy("cuda", (7, 5), "gemma3_text", "float16") == torch.float16
    with pytest.raises(ESPError, match="dtype must be one of auto, float32, bfloat16, float16, not 'fp8'"):
        dtype_policy("cpu", explicit="fp8")


def test_auto_is_the_cuda_policy_there_and_float32_until_checked_on_a_cpu():
    assert dtype_policy("cuda", (9, 0), "llama", "auto") == torch.bfloat16
    assert dtype_policy("cuda", (7, 5), "gemma3_text", "auto") == torch.float32
    assert dtype_policy("cpu", None, "llama", "auto") == torch.float32  # `load` then checks the model


@pytest.mark.parametrize("flags, isa", [({"avx2", "avx512f", "avx512_bf16", "amx_bf16"}, "AMX"),
                                         ({"avx2", "avx512f", "avx512_bf16"}, "AVX512-BF16"),
                                         ({"avx2", "avx512f"}, "AVX512"), ({"avx2", "fma"}, "AVX2"), ({"neon"}, "other")])
def test_a_cpu_s_instruction_set_class_comes_from_its_flags(flags, isa):
    import esp.device

    assert esp.device.isa_class(flags) == isa


def test_a_process_held_to_avx2_counts_as_an_avx2_machine(monkeypatch):
    """torch held to AVX2 (ATEN_CPU_CAPABILITY=avx2) on an AVX512-BF16 CPU: no native bfloat16, the AVX2 class."""
    import esp.device

    monkeypatch.setattr(esp.device, "hardware_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    monkeypatch.setattr(esp.device, "cpu_capability", lambda: "AVX512")
    assert esp.device.isa_class() == "AVX512-BF16" and esp.device.native_bf16()
    monkeypatch.setattr(esp.device, "cpu_capability", lambda: "AVX2")
    assert esp.device.isa_class() == "AVX2" and not esp.device.native_bf16()
    assert esp.device.isa_class(esp.device.hardware_flags()) == "AVX512-BF16"


@pytest.fixture
def cpu(tmp_path, monkeypatch):
    """A CPU whose flags the test sets, with an empty cache; `checks` counts the timed checks."""
    monkeypatch.setenv("ESP_CACHE", str(tmp_path))
    state = {"flags": set(), "times": (2.0, 1.0), "checks": 0}
    monkeypatch.setattr(cpu_dtype, "cpu_flags", lambda: state["flags"])

    def compare(model, tok, name):
        state["checks"] += 1
        return state["times"]

    monkeypatch.setattr(cpu_dtype, "compare", compare)
    return state


def test_auto_on_a_cpu_without_native_bf16_is_float32_without_a_check(cpu, tiny_lm):
    cpu["flags"] = {"avx2", "avx512f"}
    assert cpu_dtype.pick(tiny_lm("llama").model, None, "m") == torch.float32 and cpu["checks"] == 0


@pytest.mark.parametrize("times, want", [((2.0, 1.0), torch.bfloat16), ((1.05, 1.0), torch.float32)])
def test_auto_on_a_native_bf16_cpu_keeps_bf16_only_where_the_check_finds_it_faster(cpu, tiny_lm, times, want):
    cpu["flags"], cpu["times"] = {"avx512f", "amx_bf16"}, times
    model = tiny_lm("llama").model
    assert cpu_dtype.pick(model, None, "m") == want and cpu["checks"] == 1
    saved = json.loads(cpu_dtype.verdict_path("m").read_text())
    assert saved["dtype"] == str(want).removeprefix("torch.") and saved["flags"] == ["amx_bf16"]
    assert cpu_dtype.pick(model, None, "m") == want and cpu["checks"] == 1  # once per machine and model: stored
    assert cpu_dtype.pick(model, None, "other") == want and cpu["checks"] == 2


def test_the_bf16_check_times_a_copy_and_leaves_the_model_as_it_was(tiny_lm):
    model = tiny_lm("llama").model
    before = next(model.parameters()).clone()
    fp32_s, bf16_s = cpu_dtype.compare(model, IdTokenizer(), "tiny")
    assert fp32_s > 0 and bf16_s > 0
    assert next(model.parameters()).dtype == before.dtype and torch.equal(next(model.parameters()), before)


def test_the_command_lines_default_to_auto_and_to_float32_against_a_reference():
    from esp.cli import check_model_args

    a = argparse.Namespace(dtype=None, max_new_tokens=4)
    check_model_args(a)
    assert a.dtype == "auto"
    a = argparse.Namespace(dtype=None, max_new_tokens=4, reference=True)
    check_model_args(a)
    assert a.dtype == "float32"
    a = argparse.Namespace(dtype="bfloat16", max_new_tokens=4, reference=True)
    check_model_args(a)
    assert a.dtype == "bfloat16"  # an explicit choice wins
    with pytest.raises(SystemExit):
        check_model_args(argparse.Namespace(dtype="fp8", max_new_tokens=4))


class _ChatTokenizer:
    """Records what apply_chat_template was asked; its template names enable_thinking when `thinks`."""

    eos_token_id = None

    def __init__(self, thinks: bool):
        self.chat_template = "{% if enable_thinking is defined and enable_thinking is false %}<think></think>{% endif %}" if thinks else "{{ messages }}"
        self.kwargs = None

    def apply_chat_template(self, messages, **kwargs):
        self.kwargs = kwargs
        return [1, 2, 3]


@pytest.mark.parametrize("thinks", [True, False])
def test_chat_prompts_turn_thinking_off_where_the_template_thinks(tiny_lm, thinks):
    base = tiny_lm("qwen3")
    tok = _ChatTokenizer(thinks)
    lm = LM(base.model, tok, "stub")
    assert lm.chat_ids("hi") == [1, 2, 3]
    assert tok.kwargs["add_generation_prompt"] is True
    assert ("enable_thinking" in tok.kwargs) == thinks and tok.kwargs.get("enable_thinking", False) is False


def test_phases_time_named_phases_and_lend_time_to_another(monkeypatch):
    now = [0.0]  # a fake clock, moved by hand: the phases' sums are exact
    monkeypatch.setattr(timer, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    clock = Phases("cpu", sync=True)
    clock("draft")
    now[0] += 1.0
    with clock.within("forward"):
        now[0] += 2.0
    now[0] += 0.5  # back in the draft phase the forward interrupted
    clock("verify")
    now[0] += 0.25
    assert clock.done() == {"draft": 1.5, "forward": 2.0, "verify": 0.25, "total": 3.75}


def test_decoder_timings_off_keeps_the_same_tokens_and_phases(tiny_lm):
    from esp.decoding.engine import Decoder
    from esp.methods import build

    lm = tiny_lm("llama")
    prompt = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]
    on = Decoder(lm, build("esp:k=2:bc=30"), max_new_tokens=12).generate(prompt)
    off = Decoder(lm, build("esp:k=2:bc=30"), max_new_tokens=12, timings=False).generate(prompt)
    assert on.tokens == off.tokens and len(on.steps) == len(off.steps)
    for s in on.steps + off.steps:
        assert set(s.timings) == {"draft", "mask", "forward", "verify", "commit", "trace", "total"}
    # bc=auto learns from its forwards' times: it gets them from a non-blocking forward timer, not step timings.
    auto = Decoder(lm, build("hybrid:bc=auto"), timings=False)
    assert auto.timings is False and auto.time_forward is True
    assert Decoder(lm, build("esp:k=2:bc=30"), timings=False).time_forward is False
