"""Spec-Bench's answer files, and a run folder that resumes.

`--answers DIR` writes, per method, the file Spec-Bench's `evaluation/eval.py` writes,
`DIR/<model>-<method>.jsonl`: one line per question with `question_id`, `category`, `answer_id`,
`model_id`, `tstamp` and `choices[0]` = `index`, per turn `turns` (the text), `new_tokens`, `wall_time`,
`decoding_steps`, and `accept_lengths` per decoding step over all turns. Conventions (Spec-Bench's own
for its vanilla file): every target forward is a decoding step, the prefill included, and its accept
length is the tokens it emitted, so the mean of `accept_lengths` is the bench's tau exactly.

Beside them the folder holds the run's arguments (`<model>.args.json`) and the bench's own per-question
records (`<model>.esp.jsonl`), written after the question's answer lines: a question is done when its
record is. A run started again in the same folder skips done questions, drops the answer lines of a
question that was cut off, repairs a partial last line, and refuses other arguments with one line.
Under torchrun each rank writes files of its own (`.rank<R>` after the name) and rank 0 merges them at
the end, so that ranks on several nodes never append to one file.

`speed` reads answer files by Spec-Bench's `evaluation/speed.py` formula (our reading of it; no code of
theirs): per question tokens / seconds, the method's tokens from `new_tokens`, the base's counted again
from its texts as `len(tokenizer(text).input_ids) - 1` per turn; speed-up = mean / mean.
`python -m esp.bench.answers DIR` prints it for every answer file of a run folder, per task.
"""
from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Callable, Iterable

from esp.errors import ESPError

MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
TASKS = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag", "overall")


def method_slug(spec: str) -> str:
    """A method spec as a file-name part: ':' and '=' written as '-' ('hybrid:bc=auto' -> 'hybrid-bc-auto')."""
    return re.sub(r"[:=]", "-", spec)


def model_slug(name: str) -> str:
    """A model's name as Spec-Bench's model id: 'SmolLM2-135M-Instruct (embedded GGUF)' -> 'smollm2-135m'."""
    base = name.split(" (")[0].rstrip("/").split("/")[-1].lower()
    base = re.sub(r"-instruct$", "", base)
    return re.sub(r"[^a-z0-9._-]+", "-", base).strip("-") or "model"


def answer_text(tokenizer, tokens: list[int], eos_ids: Iterable[int]) -> str:
    """A turn's text as Spec-Bench writes it: cut at the first stop token, special tokens dropped, stripped."""
    stops = set(eos_ids)
    cut = next((i for i, t in enumerate(tokens) if t in stops), len(tokens))
    return tokenizer.decode(tokens[:cut], skip_special_tokens=True).strip()


def answer_line(q: dict, model_id: str, turns: list[dict]) -> dict:
    """One question's line of an answer file from its turns (`text`, `tokens`, `seconds`, `accept`: the
    tokens each forward emitted)."""
    return {"question_id": q.get("question_id"), "category": q["category"], "answer_id": uuid.uuid4().hex[:22],
            "model_id": model_id,
            "choices": [{"index": 0, "turns": [t["text"] for t in turns],
                         "decoding_steps": [len(t["accept"]) for t in turns],
                         "new_tokens": [t["tokens"] for t in turns], "wall_time": [t["seconds"] for t in turns],
                         "accept_lengths": [n for t in turns for n in t["accept"]]}],
            "tstamp": time.time()}


def read_lines(path: Path) -> list[dict]:
    """The complete JSON lines of a file (a partial or broken line is left out; no file: none)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def write_lines(path: Path, lines: list[dict]) -> None:
    """Replace a file with these lines, atomically (a temporary file renamed over it)."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    tmp.replace(path)


def append_line(path: Path, obj: dict) -> None:
    """One line at the end of a file, flushed to disk before returning (a kill after it keeps it)."""
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
        f.flush()
        os.fsync(f.fileno())


class RunFolder:
    """One run's folder: its arguments, every method's answer file and the bench's records, written a
    question at a time by this rank (`rank` of `world`)."""

    def __init__(self, folder: str, model_id: str, methods: list[str], args: dict, rank: int = 0, world: int = 1):
        self.dir = Path(folder)
        self.model_id, self.methods, self.args = model_id, methods, args
        self.rank, self.world = rank, world
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ESPError(f"--answers {folder}: cannot make the folder ({e.strerror}).") from None

    def answers(self, method: str) -> Path:
        return self.dir / f"{self.model_id}-{method_slug(method)}.jsonl"

    @property
    def records(self) -> Path:
        return self.dir / f"{self.model_id}.esp.jsonl"

    def files(self) -> list[Path]:
        """The final files: the records first (they say which questions are done), then the answers."""
        return [self.records] + [self.answers(m) for m in self.methods]

    def part(self, final: Path, rank: int | None = None) -> Path:
        """What a rank writes for `final` (the final file itself in a world of one)."""
        if self.world == 1 and rank is None:
            return final
        return final.with_name(f"{final.name}.rank{self.rank if rank is None else rank}")

    def parts(self, final: Path) -> list[Path]:
        """Every rank's part of `final` there is, whatever world wrote it."""
        return sorted(final.parent.glob(final.name + ".rank*"), key=lambda p: p.name)

    # ------------------------------------------------------------------ opening

    def open(self) -> dict[int, dict]:
        """Check the arguments against the folder's, repair this rank's files, and return every done
        question's record line by question index (done by any rank of any earlier run)."""
        self._check_args()
        finals = self.files()
        mine = [[self.part(f) for f in finals]]
        if self.rank == 0:  # parts of ranks that no longer exist (all, in a world of one) are nobody else's
            ranks = {int(p.name.rsplit(".rank", 1)[1]) for f in finals for p in self.parts(f)}
            gone = sorted(ranks - set(range(self.world if self.world > 1 else 0)))
            mine += [[self.part(f, r) for f in finals] for r in gone]
        for records, *answers in mine:
            self._repair(records, "index")
            done = {r["question_id"] for r in read_lines(records)}
            for path in answers:  # a question cut off between its lines keeps none of them
                self._repair(path, "question_id", done)
        out: dict[int, dict] = {}
        for f in [self.records] + self.parts(self.records):
            for r in read_lines(f):
                out.setdefault(r["index"], r)
        return out

    def _check_args(self) -> None:
        path = self.dir / f"{self.model_id}.args.json"
        if path.is_file():
            try:
                old = json.loads(path.read_text())
            except ValueError:
                old = {}
            if old != self.args:
                diff = "; ".join(f"{k} {old.get(k)!r} there, {self.args.get(k)!r} here"
                                 for k in sorted(set(old) | set(self.args)) if old.get(k) != self.args.get(k))
                raise ESPError(f"--answers {self.dir} holds a run with other arguments ({diff}): "
                               f"give another folder, or delete this one to start again.")
            return
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.args, indent=1, sort_keys=True))
        tmp.replace(path)

    @staticmethod
    def _repair(path: Path, key: str, done: set | None = None) -> None:
        """Keep a file's complete lines, once per `key`, and (given `done`) only those whose key is in it."""
        if not path.is_file():
            return
        raw = path.read_text()
        lines, seen = [], set()
        for line in read_lines(path):
            k = line.get(key)
            if k in seen or (done is not None and k not in done):
                continue
            seen.add(k)
            lines.append(line)
        if "".join(json.dumps(x) + "\n" for x in lines) != raw:
            write_lines(path, lines)

    # ------------------------------------------------------------------ writing

    def write(self, index: int, qid, lines: dict[str, dict], record: dict) -> None:
        """A finished question: its answer line in every method's file, then its record (which makes it done)."""
        for m, line in lines.items():
            append_line(self.part(self.answers(m)), line)
        append_line(self.part(self.records), {"index": index, "question_id": qid, **record})

    def merge(self, position: dict) -> None:
        """Rank 0 after every rank has finished: every part into its final file (each question once, in
        question order by `position`: question id -> index), the parts removed."""
        for f in self.files():
            parts = self.parts(f)
            if not parts:
                continue
            merged: dict = {}
            for p in [f] + parts:
                for line in read_lines(p):
                    merged.setdefault(line["question_id"], line)
            write_lines(f, sorted(merged.values(), key=lambda x: position.get(x["question_id"], len(position))))
            for p in parts:
                p.unlink()


def speed(answers: Path, base: Path, count: Callable[[str], int], task: str = "overall") -> dict:
    """Spec-Bench's speed.py formula on two answer files: mean accepted tokens (the mean of every
    accept_lengths entry), the mean tokens/s of the method (new_tokens) and of the base (its texts
    counted again, `count(text) - 1` per turn), and their ratio."""
    def pick(path: Path) -> list[dict]:
        rows = read_lines(Path(path))
        if task == "overall":
            return rows
        return [r for r in rows if (r["category"] in MT_BENCH if task == "mt_bench" else r["category"] == task)]

    method, ref = pick(answers), pick(base)
    if not method or not ref:
        raise ESPError(f"no answers for task {task!r} in {answers if not method else base}.")
    speeds = [sum(c["new_tokens"]) / sum(c["wall_time"]) for c in (r["choices"][0] for r in method)]
    accepted = [n for r in method for n in r["choices"][0]["accept_lengths"]]
    base_speeds = [sum(count(t) - 1 for t in c["turns"]) / sum(c["wall_time"]) for c in (r["choices"][0] for r in ref)]
    tps, base_tps = sum(speeds) / len(speeds), sum(base_speeds) / len(base_speeds)
    return {"mean_accepted": sum(accepted) / len(accepted), "tokens_per_s": tps, "base_tokens_per_s": base_tps,
            "speedup": tps / base_tps}


def main(argv: list[str] | None = None) -> None:
    """`python -m esp.bench.answers DIR`: every method's answer file in DIR scored by Spec-Bench's speed.py
    formula against the `ar` file, per task."""
    import argparse

    from esp.models.loader import load

    p = argparse.ArgumentParser(prog="python -m esp.bench.answers", description=main.__doc__)
    p.add_argument("folder", help="an esp.bench.run --answers folder")
    p.add_argument("--model", default="embedded", help="the run's model (its tokenizer counts the base's texts)")
    a = p.parse_args(argv)
    lm = load(a.model)
    model_id = model_slug(lm.name)
    base = Path(a.folder) / f"{model_id}-ar.jsonl"
    if not base.is_file():
        raise ESPError(f"{base} not found: score a folder of an esp.bench.run --answers run of this model.")
    count = lambda text: len(lm.tokenizer(text).input_ids)  # noqa: E731
    print("method | task | mean accepted tokens | tokens/s | base tokens/s | speed-up")
    for f in sorted(Path(a.folder).glob(f"{model_id}-*.jsonl")):
        present = {r["category"] for r in read_lines(f)}
        for task in TASKS:
            if task == "overall" or (present & set(MT_BENCH) if task == "mt_bench" else task in present):
                s = speed(f, base, count, task)
                print(f"{f.stem[len(model_id) + 1:]} | {task} | {s['mean_accepted']:.3f} | {s['tokens_per_s']:.2f} | "
                      f"{s['base_tokens_per_s']:.2f} | {s['speedup']:.3f}x")


if __name__ == "__main__":
    from esp.cli import run_main

    run_main(main)
