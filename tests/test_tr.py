"""Token Recycling: the template, the matrix's update rule, cold and hot start, and how its drafts are traced
(its tokens against plain decoding's: tests/test_lossless_matrix.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from conftest import repeated_prompt as _prompt
from esp.decoding.drafter import Forward, Proposal, StepResult
from esp.drafters.tr import PAPER, TEMPLATES, WIDTH, Template, TRDrafter, recycle
from esp.decoding.engine import Decoder
from esp.errors import ESPError
from esp.methods import available, build
from esp.decoding.tree import DraftTree

def test_paper_template_is_the_official_80_nodes_and_small_is_its_rank_sum_1_part():
    paper = Template(TEMPLATES["paper"])
    assert len(paper) == 80 and paper.shape() == [8, 21, 25, 15, 8, 3]
    assert len(set(PAPER)) == 80 and all(0 <= int(r) < WIDTH for p in PAPER for r in p)
    parents = paper.parents.tolist()
    assert all(parents[i] < i for i in range(1, 81))  # parents precede their children
    # Every node's parent is the node whose rank path drops the last rank.
    index = {p: i + 1 for i, p in enumerate(PAPER)}
    assert all(parents[index[p]] == index.get(p[:-1], 0) for p in PAPER)
    small = Template(TEMPLATES["small"])
    assert len(small) == 23 and small.shape() == [2, 3, 4, 5, 6, 3]
    assert set(TEMPLATES["small"]) < set(PAPER) and all(sum(map(int, p)) <= 1 for p in TEMPLATES["small"])


def test_fill_reads_successors_by_rank_and_drops_subtrees_of_unknown_rows():
    m = torch.full((10, WIDTH), -1, dtype=torch.long)
    m[1] = torch.tensor([2, 3, 4, 5, 6, 7, 8, 9])
    m[2] = torch.tensor([3, 1, 0, 4, 5, 6, 7, 8])  # 2 -> 3 (rank 0), 1 (rank 1)
    m[3] = torch.tensor([2, 5, 0, 1, 4, 6, 7, 8])  # 3 -> 2, 5
    t = Template(("0", "1", "00", "01", "10", "000", "010", "0000"))
    tree = t.fill(1, m)
    # 0 -> 2, 1 -> 3; 00 -> m[2][0] = 3, 01 -> m[2][1] = 1, 10 -> m[3][0] = 2; 000 -> m[3][0] = 2;
    # 010 -> m[1][0] = 2; 0000 -> m[2][0] = 3.
    assert tree.tokens == [1, 2, 3, 3, 1, 2, 2, 2, 3]
    assert tree.parents == [-1, 0, 0, 1, 1, 2, 3, 4, 6]
    m[3] = -1  # row 3 unknown: nothing below the nodes holding 3 (10, 000 and 0000 go)
    tree = t.fill(1, m)
    assert tree.tokens == [1, 2, 3, 3, 1, 2]
    assert tree.parents == [-1, 0, 0, 1, 1, 4]
    assert Template(TEMPLATES["paper"]).fill(7, m).tokens == [7]  # an unknown root drafts nothing
    zero = torch.zeros(10, WIDTH, dtype=torch.long)  # the official code's start: every row says token 0
    assert Template(TEMPLATES["paper"]).fill(7, zero).tokens == [7] + [0] * 80


def test_recycle_writes_every_fed_row_and_the_accepted_path_wins_a_repeat():
    m = torch.full((8, 2), -1, dtype=torch.long)
    m[7] = torch.tensor([1, 1])
    tokens = [1, 2, 3, 2, 4, 4]  # root 1; token 2 at nodes 1 and 3, token 4 at nodes 4 and 5
    succ = torch.arange(12).view(6, 2)  # row i: the target's top-2 after node i
    recycle(m, tokens, succ, path=[0, 2, 3])  # node 3 (a 2) is accepted, node 1 (a 2) is not
    assert m[1].tolist() == [0, 1] and m[3].tolist() == [4, 5]
    assert m[2].tolist() == [6, 7]  # the accepted row, not node 1's [2, 3]
    assert m[4].tolist() == [10, 11]  # neither on the path: the last fed row
    assert m[7].tolist() == [1, 1] and m[0].tolist() == [-1, -1]  # rows not fed are left alone


def test_observe_stores_the_target_top_k_of_every_fed_row():
    d = TRDrafter()
    d.matrix = torch.full((50, WIDTH), -1, dtype=torch.long)
    tree = DraftTree([5, 9, 11], [-1, 0, 1], [1.0] * 3, [1.0] * 3)
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    res = StepResult(proposal=Proposal(tree=tree), layout=None, root_pos=0, node_logits=logits, path=[0, 1], bonus=0,
                     choices=[], emitted=[9, 0], forward=Forward(hidden=torch.zeros(3, 1)))
    d.observe(None, res)
    for row, tok in enumerate(tree.tokens):
        assert d.matrix[tok].tolist() == torch.topk(logits[row], WIDTH).indices.tolist()


def test_cold_start_forgets_between_prompts_and_hot_start_keeps_the_matrix(tiny_lm):
    lm = tiny_lm("llama")
    prompt = _prompt(2, lm.vocab_size)
    cold = TRDrafter()
    first = Decoder(lm, cold, max_new_tokens=24).generate(prompt)
    again = Decoder(lm, cold, max_new_tokens=24).generate(prompt)
    assert [s.shape for s in again.steps] == [s.shape for s in first.steps]  # the same run from scratch
    assert first.steps[0].shape == []  # an empty matrix drafts nothing at the prefill
    hot = TRDrafter(start="hot")
    Decoder(lm, hot, max_new_tokens=24).generate(prompt)
    warm = Decoder(lm, hot, max_new_tokens=24).generate(prompt)
    assert warm.tokens == first.tokens
    assert sum(warm.steps[0].shape) > 0  # the kept matrix drafts from the first forward on
    assert len(warm.steps) < len(first.steps)  # the same text again, from a warm matrix: fewer forwards
    drafted = [n for st in warm.steps for n in st.nodes if n.status in ("accepted", "rejected")]
    assert drafted and all(n.sources == ["table"] for n in drafted)  # traced as the model's own past distributions
    other = SimpleNamespace(vocab_size=40, device=torch.device("cpu"))  # another model's vocabulary
    hot.start(SimpleNamespace(lm=other))
    assert hot.matrix.shape == (40, WIDTH) and (hot.matrix == -1).all()  # a fresh matrix


def test_registered_for_bench_cli_and_app():
    assert "tr" in available()
    assert build("tr").describe() == "tr tree=paper (80 nodes) start=cold"
    assert build("tr:tree=small:start=hot").describe() == "tr tree=small (23 nodes) start=hot"
    assert build("tr:matrix=zero").describe().endswith("start=cold matrix=zero")
    from components.settings import RunSettings, knob_reasons

    assert knob_reasons("tr")["tree"] is None and knob_reasons("tr")["bc"] is not None
    assert RunSettings(method="tr").drafter().describe().startswith("tr tree=paper")  # the app's 'static' tree


@pytest.mark.parametrize("spec, msg", [("tr:tree=dynamic", "tree must be paper"), ("tr:start=warm", "start must be cold"),
                                       ("tr:matrix=ones", "matrix must be empty"), ("tr:bc=30", "unknown setting")])
def test_bad_tr_settings_are_one_clear_line(spec, msg):
    with pytest.raises(ESPError, match=f"^tr: .*{msg}"):
        build(spec)
