"""The lossless verdict's classifier on synthetic logits (esp.bench.verdict)."""
import pytest

from esp.bench.verdict import EXACT, FAILURE, NEAR_TIE, TIE_ULPS, classify, dtype_name, tally, ulp


def row(a, za, b, zb):
    return [a, za, b, zb]


def test_ulp_of_bf16_and_fp32():
    assert ulp(20.0, "bfloat16") == 0.125  # [16, 32) in bf16: 2^(4-7)
    assert ulp(-20.0, "torch.bfloat16") == 0.125
    assert ulp(1.5, "float16") == 2.0 ** -10
    assert ulp(20.0, "float32") == 2.0 ** -19
    with pytest.raises(ValueError):
        dtype_name("int8")


def test_equal_tokens_are_exact():
    v = classify([1, 2, 3], None, [1, 2, 3], None)
    assert v.kind == EXACT and v.index is None


@pytest.mark.parametrize("units, kind", [(0, NEAR_TIE), (1, NEAR_TIE), (TIE_ULPS, NEAR_TIE), (10, FAILURE)])
def test_flip_at_a_tie_one_step_and_ten_steps(units, kind):
    u = ulp(20.0, "bfloat16")
    ar = [row(7, 20.0, 9, 20.0 - units * u)]
    m = [row(9, 20.0, 7, 20.0 - units * u)]
    v = classify([5, 7, 1], [[5, 30, 6, 1]] + ar + [[1, 3, 2, 1]], [5, 9, 4], [[5, 30, 6, 1]] + m + [[4, 3, 2, 1]],
                 "bfloat16")
    assert v.kind == kind and v.index == 1 and v.gap == pytest.approx(units)


def test_same_gap_is_a_failure_in_fp32():
    u = ulp(20.0, "bfloat16")
    v = classify([7], [row(7, 20.0, 9, 20.0 - u)], [9], [row(9, 20.0, 7, 20.0 - u)], "float32")
    assert v.kind == FAILURE and v.gap > TIE_ULPS


def test_token_outside_the_top_two_and_length_mismatch_fail():
    v = classify([7], [row(7, 20.0, 8, 20.0)], [9], [row(9, 20.0, 7, 20.0)], "bfloat16")
    assert v.kind == FAILURE and v.gap is None
    assert classify([1, 2], None, [1], None).kind == FAILURE


def test_tally_counts_and_largest_gap():
    u = ulp(20.0, "bfloat16")
    near = classify([7], [row(7, 20.0, 9, 20.0 - 2 * u)], [9], [row(9, 20.0, 7, 20.0 - u)], "bfloat16")
    t = tally([classify([1], None, [1], None), near, classify([1], None, [2], None)])
    assert t == {EXACT: 1, NEAR_TIE: 1, FAILURE: 1, "max_gap": pytest.approx(2.0)}


def test_three_way_tie_is_a_near_tie_when_recorded():
    # bf16: the plain run's row had 18 over 504 by a unit, the method's row 1653 over 504; each holds the
    # other's choice third
    ar = [18, 26.5, 504, 26.375, 1653, 26.375, 9, 20.0]
    m = [1653, 26.5, 504, 26.375, 18, 26.375, 9, 20.0]
    v = classify([18], [ar], [1653], [m], "bfloat16")
    assert v.kind == NEAR_TIE and v.gap == pytest.approx(1.0)
    assert classify([18], [ar[:4]], [1653], [m[:4]], "bfloat16").kind == FAILURE


def test_an_exact_tie_recorded_in_either_order_is_a_near_tie():
    # generate()'s argmax takes the lower id of two equal logits; a top-k may list the other first
    ref = [957, 17.75, 253, 17.75, 351, 16.5]
    ours = [957, 17.75, 253, 17.625, 351, 16.5]
    v = classify([253], [ref], [957], [ours], "bfloat16")
    assert v.kind == NEAR_TIE and v.gap == pytest.approx(1.0)
    # a token recorded but not the row's best cannot have been its choice
    assert classify([253], [[957, 17.75, 253, 17.5]], [957], [ours], "bfloat16").kind == FAILURE
