"""Token Recycling (Luo et al., ACL 2025, arXiv 2408.08696): the target's top-k next tokens after every
token it has been fed, kept in an adjacency matrix and drafted as a static breadth-first tree.

Facts from the paper and its official code (Luowaterbi/TokenRecycling), kept as they are:
- The matrix holds k = 8 successor tokens per vocabulary entry. After every verify forward, every fed
  row (the root and every draft node, accepted or rejected) overwrites the row of its own token with
  the target's top-k tokens at that row: the candidates a decoder usually throws away.
- Drafting fills a fixed template of rank paths breadth-first: node (r1, .., rd) is the r_d-th stored
  successor of the token at node (r1, .., r_{d-1}). The paper's template (the official "2.2.2") has 80
  nodes on 6 levels (8, 21, 25, 15, 8, 3).
- Cold start, as the issue reads the paper's main table: the matrix is emptied for every prompt. (The
  official evaluation script allocates one matrix for its whole run, which is a hot start.)

Choices of ours, all lossless (the shared verifier decides every token, greedy or sampled):
- `tree=small` keeps the paper's nodes whose ranks sum to at most 1 (23 nodes on 6 levels), for a CPU,
  where every fed row costs; `tree=static` is the paper's template by the app's name for a fixed tree.
- A row never written has no successors, so nothing is drafted below it. The official code starts from
  a zero matrix (`tr:matrix=zero` here): it drafts token 0 under every unknown row, then that token's
  row and the garbage below it, whose rows then overwrite real tokens' rows with the distributions
  after nonsense text. On a cold start that costs tau (SmolLM2-135M, 13 questions, 64 tokens: 1.56
  empty against 1.49 for a third-party zero-start implementation; see docs/BENCHMARKS.md).
- `start=hot` keeps the matrix across prompts for the drafter's lifetime (the paper's hot start).
- A token fed in several rows of one block keeps the row of the accepted path (the text that was
  actually written), else its last row: the official code leaves the winner to the scatter.
- The prefill writes only the root's row: the official code discards the prompt's logits, and the
  engine computes none for the prompt rows before the root.
"""
from __future__ import annotations

import torch

from esp.errors import ESPError
from esp.sampling import top_k
from esp.trace import TABLE
from esp.decoding.tree import DraftTree
from esp.decoding.drafter import Context, Drafter, Notes, Proposal, StepResult

WIDTH = 8  # successors kept per token: the paper's k (the template's ranks run 0..7)
# The paper's template as rank paths ("01" = the 2nd successor of the root's 1st), parents first.
PAPER = tuple("""
0 1 2 3 4 5 6 7
00 01 02 03 04 05 06 07 10 11 12 13 20 21 22 30 31 40 50 60 70
000 001 002 003 004 005 006 007 010 011 012 020 021 030 040 050 060 070 100 101 110 200 300 400 500
0000 0001 0002 0003 0004 0010 0011 0020 0030 0040 0100 0200 1000 2000 3000
00000 00001 00002 00010 00020 00100 01000 10000
000000 000001 000100
""".split())
TEMPLATES = {"paper": PAPER, "static": PAPER, "small": tuple(p for p in PAPER if sum(map(int, p)) <= 1)}
STARTS = ("cold", "hot")
MATRICES = {"empty": -1, "zero": 0}  # what an unwritten row holds: no successors, or token 0 (the official code)


class Template:
    """A template as tensors: each node's parent and rank, and the node range of each depth."""

    def __init__(self, paths: tuple[str, ...]):
        index = {"": 0}
        parents, ranks, levels = [-1], [0], []
        for p in paths:
            if len(p) > len(levels):
                levels.append([len(parents), len(parents)])
            index[p] = len(parents)
            parents.append(index[p[:-1]])  # a parent precedes its children
            ranks.append(int(p[-1]))
            levels[-1][1] = len(parents)
        self.parents, self.ranks = torch.tensor(parents), torch.tensor(ranks)
        self.host_parents = parents
        self.levels = [tuple(x) for x in levels]

    def __len__(self) -> int:
        return len(self.parents) - 1

    def shape(self) -> list[int]:
        """Nodes per depth, depth 1 first."""
        return [hi - lo for lo, hi in self.levels]

    def fill(self, root: int, matrix: torch.Tensor) -> DraftTree:
        """The template's tokens read from `matrix` (rows of -1: unknown), below the root `root`.

        A node whose parent's row is unknown is dropped with its subtree; what is left keeps the
        template's order, so parents still precede children."""
        tokens = torch.full((len(self.parents),), -1, dtype=torch.long, device=matrix.device)
        tokens[0] = root
        parents, ranks = self.parents.to(matrix.device), self.ranks.to(matrix.device)
        for lo, hi in self.levels:
            above = tokens[parents[lo:hi]]
            tokens[lo:hi] = torch.where(above >= 0, matrix[above.clamp(min=0), ranks[lo:hi]], -1)
        filled = tokens.tolist()  # the step's one read of the matrix; the rest is host bookkeeping
        new, toks, par = [], [], []  # new: old node index -> index in the drafted tree
        for v, (tok, up) in enumerate(zip(filled, self.host_parents)):
            new.append(len(toks) if tok >= 0 else -1)
            if tok >= 0:
                toks.append(tok)
                par.append(-1 if up < 0 else new[up])
        return DraftTree(toks, par, [1.0] * len(toks), [1.0] * len(toks))


def recycle(matrix: torch.Tensor, tokens: list[int], successors: torch.Tensor, path: list[int]) -> None:
    """Write each fed row's successors (row i of `successors`, the target's top-k after node i) into the
    matrix row of its token; a token fed twice keeps its accepted-path row, else its last row."""
    on_path = set(path)
    order = [v for v in range(len(tokens)) if v not in on_path] + list(path)
    last = {tokens[v]: v for v in order}
    rows = torch.tensor(list(last.values()), device=successors.device)
    matrix[torch.tensor(list(last), device=matrix.device)] = successors[rows].to(matrix.device)


class TRDrafter(Drafter):
    """Token Recycling: a static template filled from the adjacency matrix of recycled candidates."""

    name = "tr"
    source = TABLE  # drafts are the model's own past distributions, as in the hybrid's table

    def __init__(self, tree: str = "paper", start: str = "cold", matrix: str = "empty"):
        if tree not in TEMPLATES:
            raise ESPError(f"tr: tree must be paper (the paper's 80 nodes) or small (23, for a CPU), not {tree!r}.")
        if start not in STARTS:
            raise ESPError(f"tr: start must be cold (a fresh matrix per prompt) or hot (kept across prompts), not {start!r}.")
        if matrix not in MATRICES:
            raise ESPError(f"tr: matrix must be empty (unknown rows draft nothing) or zero (the official code's zero matrix), not {matrix!r}.")
        self.tree = "paper" if tree == "static" else tree
        self.unwritten = matrix
        self.start_mode = start
        self.template = Template(TEMPLATES[tree])
        self.matrix: torch.Tensor | None = None  # (vocabulary, WIDTH) successor tokens, -1 where unknown

    def describe(self) -> str:
        return f"tr tree={self.tree} ({len(self.template)} nodes) start={self.start_mode}" + (" matrix=zero" if self.unwritten == "zero" else "")

    def start(self, ctx: Context) -> None:
        m, lm = self.matrix, ctx.lm
        if m is None or m.shape[0] != lm.vocab_size or m.device != lm.device:
            self.matrix = torch.full((lm.vocab_size, WIDTH), MATRICES[self.unwritten], dtype=torch.long, device=lm.device)
        elif self.start_mode == "cold":
            m.fill_(MATRICES[self.unwritten])

    def propose(self, ctx: Context) -> Proposal:
        return Proposal(tree=self.template.fill(ctx.tokens[-1], self.matrix))

    def observe(self, ctx: Context, res: StepResult) -> Notes:
        successors = top_k(res.node_logits, WIDTH)[1]
        recycle(self.matrix, res.proposal.tree.tokens, successors, res.path)
        return Notes()
