"""esp.bench.merge (`python -m esp.bench merge`): chunked and multi-pass bench runs pool into the result one run
would give."""
from __future__ import annotations

from esp.bench.merge import merge
from esp.bench.run import aggregate


def _rec(qid: int, cat: str, method: str, tokens: list[int], forwards: int, tps: float) -> dict:
    return {"qid": qid, "category": cat, "method": method, "tokens": tokens, "n_tokens": len(tokens),
            "forwards": forwards, "seconds": len(tokens) / tps, "tokens_per_s": tps}


def test_chunks_and_passes_merge_into_one_run():
    full = [_rec(1, "a", "ar", [1, 2], 2, 10.0), _rec(1, "a", "x", [1, 2], 1, 20.0), _rec(1, "a", "y", [1, 2], 2, 5.0),
            _rec(2, "b", "ar", [3, 4], 2, 10.0), _rec(2, "b", "x", [3, 4], 2, 10.0), _rec(2, "b", "y", [3, 5], 1, 5.0)]
    meta = lambda ms: {"model": "m", "methods": {m: m for m in ms}, "questions": 1}  # noqa: E731
    runs = [  # pass 1 (ar, x) in two question chunks, pass 2 (ar again, y) over both questions
        {"meta": meta(["ar", "x"]), "records": full[0:2]},
        {"meta": meta(["ar", "x"]), "records": full[3:5]},
        {"meta": meta(["ar", "y"]), "records": [_rec(1, "a", "ar", [1, 2], 2, 99.0), full[2],
                                                _rec(2, "b", "ar", [3, 4], 2, 99.0), full[5]]},
    ]
    out = merge(runs)
    assert out["records"] == full  # question order, then method order; the first ar record wins
    assert out["results"] == aggregate(full, ["ar", "x", "y"])
    assert out["meta"]["questions"] == 2 and list(out["meta"]["methods"]) == ["ar", "x", "y"]
    assert out["results"]["y"]["lossless"] is False and out["results"]["x"]["lossless"] is True


def test_merged_meta_keeps_each_method_s_protocol_and_every_part_s_provenance():
    recs = [_rec(1, "a", m, [1], 1, 1.0) for m in ("ar", "x", "y")]
    made = [{"machine": {"cpu": c}, "date": "d", "command": "c"} for c in ("one", "two")]
    runs = [{"meta": {"methods": {"ar": "ar", "x": "x"}, "protocols": {"ar": "cold", "x": "cold"}, "provenance": made[0]},
             "records": recs[:2]},
            {"meta": {"methods": {"ar": "ar", "y": "y"}, "protocols": {"ar": "hot", "y": "hot"}, "provenance": made[1]},
             "records": recs[::2]}]
    meta = merge(runs)["meta"]
    assert meta["protocols"] == {"ar": "cold", "x": "cold", "y": "hot"}  # the first ar wins
    assert meta["provenance"] == made[0] and meta["merged_provenance"] == made
    assert "protocols" not in merge([{"meta": {"methods": {"ar": "ar"}}, "records": recs[:1]}])["meta"]
