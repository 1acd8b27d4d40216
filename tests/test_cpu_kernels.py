"""Packed CPU kernels (esp.models.packed, esp.models.cpu_kernels): the same linear, rows that round alike at every
width, moves and copies that stay correct, lossless decoding on them, and a check that runs once per machine."""
import copy
import json

import pytest
import torch

from conftest import ARCHS, _tiny
from esp.budget.cost import SHAPES, curve_key, shape_for
from esp.decoding.engine import Decoder
from esp.methods import build
from esp.models import cpu_kernels
from esp.models.lm import LM, IdTokenizer
from esp.models.packed import PackedLinear, packing_op

pytestmark = pytest.mark.skipif(packing_op() is None, reason="this torch has no oneDNN packed linear")


def linear(dtype: torch.dtype, bias: bool) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(48, 80, bias=bias).to(dtype).requires_grad_(False)


def tiny(arch: str = "llama") -> LM:
    torch.manual_seed(0)
    model = _tiny(arch).float().eval()
    model.generation_config.eos_token_id = None
    return LM(model, IdTokenizer(), f"tiny-{arch}")


BF16_PACKS = pytest.mark.skipif(packing_op(torch.bfloat16) is None, reason="this CPU cannot pack bfloat16 (AVX2 only)")


@pytest.mark.parametrize("dtype", [torch.float32, pytest.param(torch.bfloat16, marks=BF16_PACKS)])
@pytest.mark.parametrize("bias", [False, True])
def test_a_packed_linear_computes_the_linear_and_each_row_alike_at_every_width(dtype, bias):
    dense = linear(dtype, bias)
    packed = PackedLinear(dense, keep_dense=False)
    assert packed.weight is None and packed.packed.is_mkldnn  # the packed copy replaces the dense weight
    x = torch.randn(2, 16, 48).to(dtype)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    with torch.inference_mode():
        assert torch.allclose(packed(x).float(), dense(x).float(), atol=tol, rtol=tol)
        one = packed(x[0, :1])
        for rows in (2, 3, 4, 8, 16):  # the verifier's rows round as a one-row step does
            assert torch.equal(packed(x[0, :rows])[:1], one), rows


def test_moves_casts_copies_and_state_dicts_of_a_packed_linear_are_dense_and_exact():
    dense = linear(torch.float32, True)
    x = torch.randn(3, 48)
    packed = PackedLinear(copy.deepcopy(dense), keep_dense=False)
    assert torch.equal(packed.state_dict()["weight"], dense.weight) and torch.equal(packed.state_dict()["bias"], dense.bias)
    twin = copy.deepcopy(packed)
    assert type(twin) is torch.nn.Linear and torch.equal(twin.weight, dense.weight) and torch.equal(twin.bias, dense.bias)
    assert packed.packed is not None  # a copy leaves the original packed
    packed.to(torch.float64)  # a cast: dense from then on, in the new dtype
    assert packed.packed is None and packed.weight.dtype == torch.float64
    assert torch.allclose(packed(x.double()), dense(x).double(), atol=1e-5)


def test_a_head_tied_to_the_embeddings_keeps_the_shared_weight_and_the_rest_drop_theirs():
    model = tiny().model
    model.lm_head.weight = model.get_input_embeddings().weight  # tied, as SmolLM2's and Qwen2.5's are
    swaps = cpu_kernels.packable(model)
    assert len(swaps) == 2 * 7 + 1  # two layers of q, k, v, o, gate, up, down, and the head
    cpu_kernels.use(swaps, True)
    assert model.lm_head.weight is model.get_input_embeddings().weight  # tied: one table, now also packed
    assert all(m.weight is None for m in model.model.layers.modules() if isinstance(m, PackedLinear))
    twin = copy.deepcopy(model)  # a deep copy keeps the tie
    assert twin.lm_head.weight is twin.get_input_embeddings().weight


@pytest.mark.parametrize("arch", [a for a in ARCHS if a != "gemma3"])  # gemma3: a float32 tie at step 10, dense too
@pytest.mark.parametrize("spec", ["ar", "hybrid:bc=8", "esp:k=2:bc=12"])
def test_decoding_on_packed_kernels_is_greedy_decoding_of_the_same_model(arch, spec):
    lm = tiny(arch)
    prompt = [int(t) for t in torch.randint(0, 96, (12,), generator=torch.Generator().manual_seed(1))] * 2
    cpu_kernels.use(cpu_kernels.packable(lm.model), True)
    packed = LM(lm.model, lm.tokenizer, lm.name)
    assert packed.packed
    ours = Decoder(packed, build(spec), max_new_tokens=24).generate(prompt).tokens
    ref = lm.model.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)[0, len(prompt):].tolist()
    assert ours == ref  # the model's own greedy decoding, on the same kernels


def test_packed_kernels_have_their_own_cost_curve_and_default_shape():
    lm = tiny()
    dense_key, dense_shape = curve_key(lm), shape_for(lm).t
    cpu_kernels.use(cpu_kernels.packable(lm.model), True)
    packed = LM(lm.model, lm.tokenizer, lm.name)
    assert packed.packed and not LM(tiny().model, IdTokenizer(), "x").packed
    assert curve_key(packed) == dense_key.replace("-float32-", "-float32-packed-")
    assert tuple(shape_for(packed).t) in {SHAPES["cpu-float32-packed"], SHAPES["cpu-float32-packed-avx512"]}
    assert tuple(shape_for(packed).t) != tuple(dense_shape)


@pytest.fixture
def check(tmp_path, monkeypatch):
    """An empty cache and a check whose timings the test sets; `checks` counts the timed checks."""
    monkeypatch.setenv("ESP_CACHE", str(tmp_path))
    state = {"times": (2.0, 1.0), "checks": 0}

    def compare(model, tok, name, swaps):
        state["checks"] += 1
        return state["times"]

    monkeypatch.setattr(cpu_kernels, "compare", compare)
    return state


@pytest.mark.parametrize("times, want", [((2.0, 1.0), True), ((1.03, 1.0), False)])
def test_the_kernels_are_packed_only_where_the_check_finds_them_faster_and_the_check_runs_once(check, times, want):
    check["times"] = times
    lm = tiny()
    assert cpu_kernels.pick(lm.model, None, "m") is want and check["checks"] == 1
    assert isinstance(lm.model.lm_head, PackedLinear) is want
    path = cpu_kernels.verdict_path("m", "kernels", f"float32-{torch.backends.cpu.get_cpu_capability()}")
    saved = json.loads(path.read_text())
    assert saved["packed"] is want and saved["dtype"] == "float32" and saved["threads"] == torch.get_num_threads()
    again = tiny()
    assert cpu_kernels.pick(again.model, None, "m") is want and check["checks"] == 1  # stored: no second check
    assert isinstance(again.model.lm_head, PackedLinear) is want


@pytest.fixture
def no_bf16_packing(monkeypatch):
    """oneDNN as an AVX2-only CPU has it: packing a bfloat16 weight raises, float32 packs."""
    reorder = torch.ops.mkldnn._reorder_linear_weight

    def refuse(weight, *args):
        if weight.dtype == torch.bfloat16:
            raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx512bw")
        return reorder(weight, *args)

    packing_op.cache_clear()
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuse)
    yield
    packing_op.cache_clear()  # the next check, in a later test, meets the real reorder (monkeypatch restores it)


def test_where_the_cpu_cannot_pack_bfloat16_a_bfloat16_model_stays_dense_and_decodes(check, no_bf16_packing):
    assert packing_op(torch.bfloat16) is None and packing_op(torch.float32) is not None
    lm = tiny()
    model = lm.model.to(torch.bfloat16)
    assert cpu_kernels.packable(model) == [] and cpu_kernels.pick(model, None, "m") is False
    assert check["checks"] == 0 and type(model.lm_head) is torch.nn.Linear  # nothing to time: dense, no error
    prompt = list(range(3, 15))
    ours = Decoder(LM(model, lm.tokenizer, lm.name), build("hybrid:bc=8"), max_new_tokens=12).generate(prompt).tokens
    assert ours == model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0, len(prompt):].tolist()
    assert len(cpu_kernels.packable(tiny().model)) == 2 * 7 + 1  # float32 still packs


def test_a_model_packs_exactly_where_this_cpu_packs_its_dtype():
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        swaps = cpu_kernels.packable(tiny().model.to(dtype))
        assert bool(swaps) == (packing_op(dtype) is not None), dtype  # this machine's answer, never an error
    assert packing_op(torch.float64) is None


def test_the_check_times_both_kernels_and_leaves_the_model_dense():
    lm = tiny()
    swaps = cpu_kernels.packable(lm.model)
    dense_s, packed_s = cpu_kernels.compare(lm.model, lm.tokenizer, lm.name, swaps)
    assert dense_s > 0 and packed_s > 0
    assert type(lm.model.lm_head) is torch.nn.Linear and not LM(lm.model, lm.tokenizer, lm.name).packed
