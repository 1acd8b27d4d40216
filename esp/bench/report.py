"""`python -m esp.bench.report` (or `python -m esp.bench report`): write docs/BENCHMARKS.md from the JSON in
docs/results/, so that no figure on that page can drift from the run that made it.

    python -m esp.bench.report                  # rewrites docs/BENCHMARKS.md
    python -m esp.bench.report --check          # exit 1 if the page differs from what the results give

Which results are today's is docs/results/manifest.json: one entry per table, newest first, naming its files, what
kind of table they make, the methods to show and a one-line note. A table names its machine (CPU, cores, the flags
that decide what a wide block costs), its date and the command that made it: from the results file when the bench
wrote them there (esp.bench.provenance, every run from now on), else from the manifest, which holds them as the
page of the day stated them. One machine per table; the tables are grouped by their machine's instruction-set class
(AVX2, AVX512, AVX512-BF16, AMX, an emulated class apart, "unknown" where the file does not say). A cell that is not a valid measurement is left blank
(esp.bench.tables); the narrative, earlier runs and every investigation are in docs/history.md.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from esp.bench import paper
from esp.bench import tables as t
from esp.bench.provenance import describe, isa_of

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
PAGE = ROOT / "docs" / "BENCHMARKS.md"
COMMAND = "python -m esp.bench.report"

INTRO = f"""# Benchmarks

Written by `{COMMAND}` from the JSON in [results/](results/) (today's files are listed in
[results/manifest.json](results/manifest.json)); edit the manifest or run the bench, never this page. How the bench
works: [bench.md](bench.md). Every earlier run, the narrative and the investigations: [history.md](history.md).

- **CPUs, and one GPU check.** Every speed-up below was measured on a CPU, where a wide block costs several one-row
  forwards, so ESP alone is slower than plain decoding and the hybrid with a measured budget (`bc=auto`) is what
  gains. The two tables run on an H200 (`scripts/gpu_check.sh`) hold random-weight shapes, so costs, losslessness
  and a projection, no measured speed-up.
- **tau** = generated tokens / target forwards (prefill counted). **Speed-up** = mean tokens/s of a method over the
  mean of `ar` in the same run, questions interleaved (Spec-Bench's ratio of means); **vs `generate()`**: over
  transformers' own greedy `model.generate()` timed as a row. **Oracle**: the best any budget could do with the same
  drafts on this machine's cost curve; the fraction is the measured speed-up over it. **exact / near-tie / failure**:
  the lossless verdict against `ar` (`esp.bench.verdict`: float32 must be exact; bf16 may flip at a rounding tie).
- A blank cell is not a measurement: missing, not finite, a timing from a run on a shared machine (tau only), or a
  speed-up over `ar` above {t.SLACK} x its tau (a broken timing).
- `$Q` is Spec-Bench's development split, `../shared/data/spec_bench/question.jsonl`."""


def load(name: str, root: Path = RESULTS) -> dict:
    return json.loads((root / name).read_text())


def made_of(data: dict) -> dict | None:
    """The provenance a results file carries (esp.bench.provenance), if the bench wrote one."""
    return (data.get("meta") or {}).get("provenance") or data.get("provenance")


def heading(entry: dict, manifest: dict, data: list[dict]) -> tuple[str, str, str]:
    """(the table's heading line, its command, its machine's instruction-set class): machine and date from the files
    when they hold them (all alike), else from the manifest (whose machines' class is unknown: the pages of the day
    did not record it)."""
    made = [m for m in map(made_of, data) if m]
    if made:
        machines = {json.dumps(m["machine"], sort_keys=True) for m in made}
        if len(machines) > 1:
            raise ValueError(f"{entry['title']}: its files ran on different machines; one machine per table.")
        machine, date = made[0]["machine"], made[0]["date"].replace("T", " ").replace("Z", " UTC")
        # Each file's command, once; a file written before its script recorded its provenance: the manifest's. A
        # merged file's provenance is its first part's, so where a table holds one the manifest's command stands.
        commands = [m["command"] for m in made] + ([entry["command"]] if len(made) < len(data) else [])
        merged = any((d.get("meta") or {}).get("merged_from") for d in data)
        command = entry["command"] if merged and entry.get("command") else "\n".join(dict.fromkeys(commands))
    else:
        machine, date, command = manifest["machines"][entry["machine"]], entry["date"], entry["command"]
    return f"### {entry['title']} · {describe(machine)} · {date}", command, isa_of(machine)


def bench_table(entry: dict, data: list[dict]) -> str:
    """esp.bench results: a row per method (tables.summary), a method from the first file that has it."""
    cols = t.columns(data, [f not in entry.get("tau_only", []) for f in entry["files"]])
    return t.summary(cols, entry.get("methods") or list(cols))


def batch_table(entry: dict, data: list[dict]) -> str:
    """esp.bench --batch: a row per batch size, each method's tokens/s over batched generate()'s (tau), and the rows
    whose tokens equal generate()'s; several files (a run per dtype) stack, with a dtype column."""
    methods = entry.get("methods") or [m for m in data[0]["runs"][0] if m != "generate()"]
    several = len(data) > 1
    rows = []
    for run in data:
        first = [str(run.get("meta", {}).get("dtype", "")).removeprefix("torch.")] if several else []
        for by in run["runs"]:
            ref = by["generate()"]
            same = [f"{sum(a == b for a, b in zip(by[m]['per_prompt'], ref['per_prompt']))}" for m in methods]
            rows.append(first + [str(ref["batch"]), f"{ref['tokens_per_s']:.1f}"]
                        + [f"{_ratio(by[m], ref)} ({t.tau(by[m]['tau'])})" for m in methods]
                        + [" / ".join(same) + f" of {len(ref['per_prompt'])}"])
    head = (["dtype"] if several else []) + ["B", "`generate()` tok/s"]
    head += [f"`{m}` x `generate()` (tau)" for m in methods] + ["rows = `generate()`"]
    return t.markdown(head, rows)


def _ratio(run: dict, ref: dict) -> str:
    """A method's ratio to generate(): the median over rounds and its range where the file has rounds
    (`--rounds`), else the one run's."""
    x = run.get("x_generate")
    if x:
        return f"{t.ratio(x['median'])} [{x['min']:.2f}-{x['max']:.2f}]"
    return t.ratio(run["tokens_per_s"] / ref["tokens_per_s"])


def per_prompt_table(entry: dict, data: list[dict]) -> str:
    """A fresh drafter per prompt against generate() (scripts/first_prompt.py's files): a row per dtype."""
    methods = entry.get("methods") or list(data[0]["tokens_per_s"])
    rows = []
    for d in data:
        rows.append([d["dtype"], f"{d['generate_tokens_per_s']:.1f}"]
                    + [f"{d['tokens_per_s'][m]:.1f} ({t.ratio(d['speedup_over_generate'][m])})" for m in methods]
                    + [", ".join(t.verdicts(d["verdicts"][m]) for m in methods)])
    head = ["dtype", "`generate()` tok/s"] + [f"`{m}` tok/s (x `generate()`)" for m in methods] + ["exact / near-tie / failure"]
    return t.markdown(head, rows)


def lossless_table(entry: dict, data: list[dict]) -> str:
    """The verdict command's files (or their earlier form): a row per method, alone and batched, per dtype (the
    dtypes of every file, in order)."""
    by_dtype = {k: v["verdicts"] for d in data
                for k, v in (d["dtypes"].items() if "dtypes" in d else [(d["dtype"], {"verdicts": d["verdicts"]})])}
    rows = []
    for dtype, vs in by_dtype.items():
        for name, v in vs.items():
            if " B=" in name:
                continue
            batched = next((w for k, w in vs.items() if k.startswith(f"{name} B=")), None)
            rows.append([dtype, f"`{name}`", t.verdicts(v), f"{v['max_gap']:.1f}", t.verdicts(batched),
                         f"{batched['max_gap']:.1f}" if batched else ""])
    size = next((k.split(" B=")[1] for vs in by_dtype.values() for k in vs if " B=" in k), "")
    return t.markdown(["dtype", "run", "alone: exact / near-tie / failure", "largest gap (units)",
                       f"batches of {size}", "largest gap (units)"], rows)


def first_call_table(entry: dict, data: list[dict]) -> str:
    """The first call of a fresh process: the medians over questions and the total."""
    d = data[0]
    return t.markdown(["questions", "first call / the same call again: median (max)", "`generate()` / first call: median",
                       "over all questions"],
                      [[str(d["questions"]), f"{d['first_over_again_median']:.2f} ({d['first_over_again_max']:.2f})",
                        t.ratio(d["first_vs_generate_median"]), t.ratio(d["first_vs_generate_ratio_of_sums"])]])


def ablation_table(entry: dict, data: list[dict]) -> str:
    """The hybrid's sources, a row per model: tau at bc=60 / speed-up over `ar` at bc=auto per subset, what ESP adds."""
    rows, at = [], 0
    for model in entry["models"]:
        files = data[at : at + len(model["files"])]
        at += len(model["files"])
        got = t.by_sources(files)
        cells = []
        for s in t.SUBSETS:
            wide, auto = got.get(("60", s)), got.get(("auto", s))
            cells.append(" / ".join(x for x in (t.tau(wide["tau"]) if wide else "", t.speedup(auto["speedup"], auto["tau"]) if auto else "") if x))
        full, bare = got.get(("60", t.SUBSETS[0])), got.get(("60", "lookup+table"))
        cells.append(f"{full['tau'] / bare['tau'] - 1:+.1%}" if full and bare else "")
        rows.append([model["label"]] + cells)
    return t.markdown(["model"] + [t.LABELS[s] for s in t.SUBSETS] + ["ESP adds (tau, bc=60)"], rows)


def lens_table(entry: dict, data: list[dict]) -> str:
    """The bench's --lens over several models (one file each): per eighth of each model's depth, the real token's
    median rank in the mask's raw logit lens and its top-5 rate, accepted against rejected masks."""
    pooled = [next(r["lens"] for r in d["results"].values() if r.get("lens")) for d in data]
    head = "| depth | " + " | ".join(f"{d['meta']['model'].split(' (')[0]} ({len(p['accepted']['median_rank']) - 1} layers)"
                                      for d, p in zip(data, pooled)) + " |"
    rows = [head, "|---" * (len(data) + 1) + "|",
            "| masks, accepted / rejected | " + " | ".join(f"{p['accepted']['n']} / {p['rejected']['n']}" for p in pooled) + " |"]
    for eighth in range(9):
        cells = []
        for p in pooled:
            a, j = p["accepted"], p["rejected"]
            i = round(eighth * (len(a["median_rank"]) - 1) / 8)
            cells.append(f"{a['median_rank'][i]:g} / {j['median_rank'][i]:g} ({a['top5_rate'][i]:.0%} / {j['top5_rate'][i]:.0%})")
        name = {0: "0 (embeddings)", 8: "8/8 (output)"}.get(eighth, f"{eighth}/8")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def gpu_table(entry: dict, data: list[dict]) -> str:
    """The prepared GPU check (scripts/gpu_check.sh): per random-weight shape, the forward cost curve t(q)/t(1) and
    each configuration's step with the engine's share; a projected speed-up over `ar` from the tau a CPU run measured
    (entry["projection"]: its file, and the method -> the configuration whose step it takes); then the mask
    builders, host syncs, batches, `custom_generate` and the app's views, one line each."""
    costs = next(d for d in data if "models" in d)
    syncs = next((d for d in data if "methods" in d), None)
    batch = next((d for d in data if "custom_generate" in d), None)
    models = costs["models"]
    sizes = list(next(iter(models.values()))["curve_ms"])
    curve = t.markdown(["t(q) / t(1), q ="] + sizes,
                       [[f"{name} (t(1) = {m['curve_ms']['1']:.1f} ms)"] + [f"{m['curve_ratio'][q]:.2f}" for q in sizes]
                        for name, m in models.items()])
    configs = next(iter(models.values()))["overhead"]
    steps = t.markdown(["step"] + [f"{name}: ms per step, engine share" for name in models],
                       [[c] + [f"{m['overhead'][c]['mean_ms']['total']:.1f}, {m['overhead'][c]['engine_share']:.1%}"
                               for m in models.values()] for c in configs])
    proj = entry["projection"]
    taus = proj["results"]
    projected = t.markdown(
        ["method", f"tau ({proj['label']})"] + [f"{name}: step ms, projected x `ar`" for name in models],
        [[f"`{method}`", t.tau(taus[method]["tau"])]
         + [f"{m['overhead'][c]['mean_ms']['total']:.1f}, "
            f"{t.ratio(taus[method]['tau'] * m['curve_ms']['1'] / m['overhead'][c]['mean_ms']['total'])}"
            for m in models.values()] for method, c in proj["methods"].items()])
    lines = ["Mask builders at BC = 60 (median us, efficient / naive): " + "; ".join(
        f"{name} {b['efficient']:.0f} / {b['naive']:.0f}" for name, b in costs["builders_us"].items()) + "."]
    if syncs:
        lines.append(f"Host syncs per step ({syncs['model']}, timings off / on): " + "; ".join(
            f"`{m}` {r['total_mean_untimed']:.3g} / {r['total_mean']:.3g}" for m, r in syncs["methods"].items()) + ".")
    if batch:
        rows = batch["batch"]
        lines.append(f"Batches of {rows[0]['batch']} ({batch['tokens']} tokens): rows equal to each prompt alone: "
                     + ", ".join(f"`{r['method']}` {r['same_as_alone']}/{r['batch']}" for r in rows)
                     + "; `model.generate(custom_generate=...)` equal to `generate()`: "
                     + ", ".join(f"`{c['method']}` {'yes' if c['equal_to_generate'] else 'NO'}" for c in batch["custom_generate"])
                     + ".")
        v = batch.get("views")
        if v:
            lines.append(f"The app's views (`{v['spec']}`, {v['dtype']}, median of {v['rounds']} interleaved rounds): "
                         f"{v['ms_per_step']['app views']:.1f} against {v['ms_per_step']['no views']:.1f} ms per step "
                         f"without them, {v['ratio']:.2f}x.")
    return "\n\n".join([curve, steps, projected, *lines])


def paper_section(entry: dict, data: list[dict]) -> str:
    """The paper's ablations (esp.bench.paper): per model (entry["models"]), its timed run and its lens run."""
    return paper.section([(m["label"], data[2 * i], data[2 * i + 1]) for i, m in enumerate(entry["models"])])


def figure_block(entry: dict, data: list[dict]) -> str:
    """Overall tau per method and model as text bars (a fenced block: the same on GitHub, in a terminal, in a diff)."""
    return "```\n" + t.figure({t.run_label(d): d["results"] for d in data}, entry["methods"], overall=True) + "\n```"


def views_table(entry: dict, data: list[dict]) -> str:
    """`esp.bench views` files, a row per model: esp.decode with views on and off (medians of interleaved rounds)."""
    rows = [[d["model"], f"`{d['method']}`", str(d["max_new_tokens"]), str(d["rounds"]), f"{d['median_off']:.2f}",
             f"{d['median_on']:.2f}", t.ratio(d["ratio"]), "yes" if d["same_tokens"] else "no"] for d in data]
    return t.markdown(["model", "method", "tokens", "rounds", "`views=False` (s)", "`views=True` (s)", "on / off",
                       "same tokens"], rows)


def class_table(entry: dict, data: list[dict]) -> str:
    """`scripts.class_run` files, a row per run of the class: runs served, the slowest and the median from pressing
    Run to the last update, places told, whether each page holds every step of its run (the player scrubs them in
    the browser); and one run through the app against esp.decode(views=True)."""
    rows = []
    for d in data:
        vs = d.get("app_vs_engine")
        rows.append([str(d["students"]), str(d["max_new_tokens"]), f"{d['served']} / {len(d['failed'])}",
                     f"{d['slowest_s']:.1f}", f"{d['median_s']:.1f}", str(d["told_place"]),
                     "all" if d["all_scrubbed"] else "not all",
                     _app_vs_engine(vs)])
    return t.markdown(["sessions", "tokens", "served / refused or failed", "slowest (s)", "median (s)",
                       "told their place", "every step held to scrub",
                       "one run: app / `esp.decode(views=True)`, the server's threads; every core (s)"], rows)


def _app_vs_engine(vs: dict | None) -> str:
    if not vs:
        return ""
    said = f"{vs['app_median']:.2f} / {vs['engine_median']:.2f} = {t.ratio(vs['ratio'])}"
    if "ratio_every_core" in vs:
        said += f"; / {vs['engine_every_core_median']:.2f} = {t.ratio(vs['ratio_every_core'])}"
    if "paired_ratio" in vs:
        said += (f" (the median round's own ratio {t.ratio(vs['paired_ratio'])}; "
                 f"{t.ratio(vs['paired_ratio_every_core'])})")
    return said


KINDS = {"bench": bench_table, "batch": batch_table, "per_prompt": per_prompt_table, "lossless": lossless_table,
         "first_call": first_call_table, "ablation": ablation_table, "figure": figure_block, "lens": lens_table,
         "gpu": gpu_table, "views": views_table, "class": class_table,
         "paper": paper_section}


def files_of(entry: dict) -> list[str]:
    """The files a table reads: its own, or each model's in turn (the kinds with a row or a column per model)."""
    return [f for m in entry["models"] for f in m["files"]] if "models" in entry else entry["files"]


def section(entry: dict, manifest: dict, root: Path) -> tuple[str, str]:
    """(the table's machine class, its section: heading, command, table, sources and note)."""
    data = [load(f, root) for f in files_of(entry)]
    head, command, isa = heading(entry, manifest, data)
    cited = files_of(entry)
    if "projection" in entry:  # a figure from another machine's run that the table reads (its tau), not its own
        proj = entry["projection"]
        entry = {**entry, "projection": {**proj, "results": load(proj["file"], root)["results"]}}
        cited = [*cited, proj["file"]]
    sources = ", ".join(f"[{f}](results/{f})" for f in cited)
    parts = [head, "", "```\n" + command + "\n```", "", KINDS[entry["kind"]](entry, data), "", f"From {sources}."]
    if entry.get("note"):
        parts[-1] += " " + entry["note"]
    return isa, "\n".join(parts)


def group_heading(isa: str) -> str:
    """The heading over the tables of one instruction-set class (what a wide block costs turns on it)."""
    if isa == "unknown":
        return ("## Machine class unknown\n\nThese files do not record the CPU's instruction-set class (they predate "
                "it); each heading gives the machine as the file or the page of the day stated it.")
    return f"## {isa} CPUs"


def render(root: Path = RESULTS) -> str:
    """The whole page from the manifest and the results files under `root`: the tables grouped by their machine's
    instruction-set class, the classes in the order of their newest table, the manifest's order within each."""
    manifest = load("manifest.json", root)
    groups: dict[str, list[str]] = {}
    for entry in manifest["tables"]:
        isa, text = section(entry, manifest, root)
        groups.setdefault(isa, []).append(text)
    return "\n\n".join([INTRO] + [group_heading(isa) + "\n\n" + "\n\n".join(texts)
                                  for isa, texts in groups.items()]) + "\n"


def figures(text: str) -> set[str]:
    """Every figure in a page's table rows and figure bars, as a reader quotes it: '1.53x', '1.59', '90%' (the page's
    notes are not measurements)."""
    return {f for x in text.splitlines() if x.startswith("|") or "█" in x for f in t.FIGURE.findall(x)}


def quoted(text: str) -> set[str]:
    """The figures a Markdown text quotes: every one in its table rows, and every speed-up or percentage ('1.53x',
    '90%') in its prose; front matter, code blocks, versions and identifiers are not figures."""
    body = re.sub(r"```.*?```", "", re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S), flags=re.S)
    return figures(body) | {f for x in body.splitlines() if not x.startswith("|") for f in t.RATE.findall(x)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog=COMMAND, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=str(RESULTS), help="the results folder (with its manifest.json)")
    p.add_argument("--out", default=str(PAGE))
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page differs from the results")
    a = p.parse_args(argv)
    page = render(Path(a.results))
    if a.check:
        same = Path(a.out).is_file() and Path(a.out).read_text() == page
        print(f"{a.out} is {'up to date' if same else 'out of date: run ' + COMMAND}")
        sys.exit(0 if same else 1)
    Path(a.out).write_text(page)
    print(f"wrote {a.out}: {page.count(chr(10))} lines")


if __name__ == "__main__":
    main()
