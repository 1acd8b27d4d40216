"""Spec-Bench questions: the one loader every bench command, script and test selects them with."""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from esp.errors import ESPError

# The development split as a checkout sees it (../shared beside the repository); only a default for commands.
DEV_QUESTIONS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "spec_bench" / "question.jsonl"


def load_questions(path: str | Path, per_category: int | None = None, ids: list[int] | None = None,
                   skip: int = 0) -> list[dict]:
    """Questions in file order: of each category, the first `skip` left out, then the first `per_category`
    (all when None); only those whose question_id is in `ids`, when given."""
    p = Path(path)
    if not p.is_file():
        raise ESPError(f"Questions file {str(path)!r} not found (Spec-Bench's question.jsonl, one JSON object a line).")
    seen: dict[str, int] = defaultdict(int)
    out = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            q = json.loads(line)
            q["turns"][0], q["category"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ESPError(f"{path}:{n} is not a Spec-Bench question (needs 'category' and 'turns').") from None
        if ids is not None and q.get("question_id") not in ids:
            continue
        seen[q["category"]] += 1
        if seen[q["category"]] > skip and (per_category is None or seen[q["category"]] <= skip + per_category):
            out.append(q)
    if not out:
        raise ESPError(f"{path} holds no questions" + (f" with the ids {ids}." if ids is not None else "."))
    return out
