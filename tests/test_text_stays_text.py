"""Text stays text (issue 21): markup that comes from a link, an opened trace or a prompt reaches every view
as the characters it is (asserted on the handlers' outputs), and a lecture made from a crafted trace holds
no executable injection."""
from __future__ import annotations

import copy
import html
import json
import re
import warnings
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import plotly.graph_objects as go
import pytest

from components.common import md_text, plot_text, toast_text
from components.lecture import _PAGE, fill, lecture_html, script_json
from components.settings import RunSettings
from explorer import calls, lesson
from explorer.session import Session
from explorer.views import refuse, refusal_line

ROOT = Path(__file__).resolve().parents[1]
# What a crafted trace carries, field by field; none of it may reach the page as markup.
SETTINGS = "<b>S</b> **bold** [click](http://evil.example) _it_"
DEVICE = "<img src=x onerror=alert(1)>"
TOKEN = "<b>tok</b>"
KIND = "<i>k</i>"
SPEC = "<form action=//evil>spec</form>"
MARKERS = ("<b>S", "**bold**", "<img", "<b>tok", "<i>k", "<form")


def read(markdown: str) -> str:
    """What a visitor reads of one line of Markdown: backslash escapes resolved, entities decoded."""
    return html.unescape(re.sub(r"\\(.)", r"\1", markdown))


def assert_text(markdown: str, *shown: str) -> None:
    """`markdown` renders no crafted markup, and reads as the crafted characters (code spans, which the step
    words put tokens in, are literal text in Markdown and are left out of the check)."""
    markdown = re.sub(r"(?<!\\)`[^`]*`", "`code`", markdown)
    assert not any(m in markdown for m in MARKERS), markdown
    assert re.search(r"(?<!\\)\]\(", markdown) is None  # no link
    assert "http://" not in markdown and "www." not in markdown  # no autolink either
    for s in shown:
        assert s in read(markdown), (s, markdown)


def figure_strings(fig: go.Figure | dict) -> list[str]:
    out: list[str] = []

    def walk(v) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
    walk(fig if isinstance(fig, dict) else fig.to_plotly_json())
    return out


def crafted_trace(tmp_path: Path, **meta) -> str:
    data = json.loads((ROOT / "assets" / "trace_copy.json").read_text())
    data["meta"].update(settings=SETTINGS, device=DEVICE, **meta)
    for step in data["steps"]:
        step["nodes"][0]["text"] = TOKEN
        if len(step["nodes"]) > 1:
            step["nodes"][1]["text"] = TOKEN
        step["emitted_text"] = [TOKEN] * len(step["emitted"])
        step["row_kinds"] = [k if k == "root" else KIND for k in step["row_kinds"]]
        step["row_labels"] = [f"{label} {KIND}" for label in step["row_labels"]]
    path = tmp_path / "<b>crafted<b>.json"  # a file name holds no slash
    path.write_text(json.dumps(data))
    return str(path)


def test_the_helpers_escape_what_renders_and_keep_words_whole():
    assert md_text("<b>x</b> & **y** `z` [a](b) a|b ~~s~~ $$x$$") == \
        "&lt;b&gt;x&lt;/b&gt; &amp; \\*\\*y\\*\\* \\`z\\` \\[a\\](b) a\\|b \\~\\~s\\~\\~ \\$\\$x\\$\\$"
    assert md_text("_it_ trace_copy.json line\nbreak") == "\\_it\\_ trace_copy.json line break"
    assert md_text("see http://e.example, www.e.example or me@e.example") == \
        "see http\\://e.example, www\\.e.example or me\\@e.example"
    assert plot_text("<b>x</b> & y") == "&lt;b&gt;x&lt;/b&gt; &amp; y"


class _Rendered(HTMLParser):
    """What a browser shows of an HTML string: its text, and the tags that it would render."""

    def __init__(self, markup: str):
        super().__init__(convert_charrefs=True)
        self.text, self.tags = "", []
        self.feed(markup)
        self.close()

    def handle_data(self, data: str) -> None:
        self.text += data

    def handle_starttag(self, tag: str, attrs) -> None:
        self.tags.append(tag)

    handle_startendtag = handle_starttag

    def handle_comment(self, data: str) -> None:
        self.tags.append("!--")

    def handle_pi(self, data: str) -> None:
        self.tags.append("?")


SENT = "step must be a number, not '<b>x</b>' & '&#x27;<!--c--><?p' (a < b, c >= 2)."


def test_a_refusal_in_markdown_is_escaped_and_in_a_toast_is_the_plain_sentence():
    status = refusal_line(SENT)  # a status line (Markdown)
    assert status.startswith("⚠️ ") and "<b>" not in status and read(status) == f"⚠️ {SENT}"
    toast = refusal_line(SENT, "toast")  # gr.Warning, gr.Error, a refused queue join
    assert toast == "⚠️ step must be a number, not '‹b>x‹/b>' & '＆#x27;‹!--c-->‹?p' (a < b, c >= 2)."
    shown = _Rendered(toast)  # the page renders a toast's message as HTML; gradio_client hands over the string
    assert shown.text == toast and not shown.tags  # so both read the same characters, and no markup forms
    assert _Rendered(SENT).tags and toast_text("it's <3 & ok") == "it's <3 & ok"  # only what would render moves


def test_every_kind_of_refusal_uses_its_medium(tmp_path):
    with warnings.catch_warnings(record=True) as toasts:
        warnings.simplefilter("always")
        assert refuse(SENT, "test") == refusal_line(SENT)  # the status, and its toast (outside a request, a warning)
    assert [str(w.message) for w in toasts] == [refusal_line(SENT, "toast")]
    session = Session()
    calls.open_shipped("trace_copy", session)
    with pytest.raises(gr.Error) as e:  # Export has no status: its refusal is a toast (and gradio_client's AppError)
        calls.export(session, "x")
    assert e.value.message == "⚠️ step must be a number, not 'x'."  # no &#x27; in either medium
    with pytest.raises(gr.Error) as e:
        calls.export(session, "<b>x</b>")
    assert e.value.message == "⚠️ step must be a number, not '‹b>x‹/b>'."
    note = calls.check_settings(2, 30, 0.1, "mean", "static", "greedy", 0.7, 0.95, 0, 64, "efficient", "<b>m</b>")
    assert note == refusal_line("Unknown method '<b>m</b>': choose from " + note.split("choose from ")[1])


def test_markup_in_a_link_shows_as_text():
    query = {"trace": "<b>x</b>", "step": "<i>2</i>", "tab": "<form>[a](http://e.example)"}
    out = lesson.open_link(Session(), SimpleNamespace(query_params=query))
    assert out[0].startswith("⚠️ This link was partly wrong")
    assert_text(out[0])
    assert "<b>" not in out[0] and "<i>" not in out[0]
    for shown in ("'<b>x</b>'", "'<i>2</i>'", "'<form>[a](http://e.example)'"):
        assert shown in read(out[0])


def assert_html_text(markup: str, *shown: str) -> None:
    """`markup` (escaped HTML the player writes with innerHTML) forms only the player's own tags (bold, code, a
    table), and reads as the crafted characters."""
    rendered = _Rendered(markup)
    assert set(rendered.tags) <= {"b", "code", "table", "thead", "tbody", "tr", "th", "td"}, rendered.tags
    for s in shown:
        assert s in rendered.text, (s, rendered.text)


def test_markup_in_an_opened_trace_shows_as_text_in_every_view(tmp_path):
    session = Session()
    out = calls.open_trace(crafted_trace(tmp_path), session, 1)
    status, player = out[0], out[1]
    assert status.startswith("**Done**")
    assert_text(status, SETTINGS, "recorded: <b>crafted<b>.json")
    frame = player["frames"][1]
    assert_html_text(frame["words"], f"{KIND} row")
    assert_html_text(frame["cost_note"], f"this {DEVICE}")
    assert_html_text(frame["stats"])
    assert {t[0] for f in player["frames"] for t in f["tokens"]} == {TOKEN}  # written with textContent: text
    assert_html_text(frame["nodes"][1][1], f"Node 1 '{TOKEN}'")  # the focus note
    assert_html_text(frame["tokens"][0][3], f"Token '{TOKEN}'")  # a token's note
    assert all(TOKEN in label for label, *_ in frame["nodes"][:2])  # the Focus box's labels: textContent too
    figures = {**{name: frame[name] for name in ("tree", "mask", "lens")}, "eye": frame["eye"][0],
               **{name: view["figure"] for name, view in player["views"].items()},
               "bands": {"data": frame["bands"] + frame["focus_bands"]}}
    for name, fig in figures.items():
        strings = figure_strings(fig)
        assert not any(m in s for s in strings for m in MARKERS), (name, [s for s in strings if "<" in s][:5])
    tree = figure_strings(frame["tree"])
    assert any("&lt;b&gt;to" in s for s in tree) and any(plot_text(TOKEN) in s for s in tree)  # label, hover
    assert any(plot_text(TOKEN) in s for s in figure_strings(frame["mask"]))  # the row and column names
    assert any(plot_text(DEVICE) in s for s in figure_strings(player["views"]["cost"]["figure"]))
    session.meta["spec"] = SPEC  # no opened trace carries one (below), but the table escapes what it is given
    alt = session.steps[1]
    assert_text(calls.whatif_table(session, session.steps[1], alt, RunSettings()), SPEC)


def test_a_trace_whose_spec_is_markup_is_refused_with_the_markup_as_text(tmp_path):
    session = Session()
    refused = calls.open_trace(crafted_trace(tmp_path, spec=SPEC), session)[0]
    assert refused.startswith("⚠️ This is not an ESP Explorer trace") and "<form" not in refused
    assert SPEC in read(refused) and not session.steps


def test_markup_in_settings_and_a_refused_request_shows_as_text():
    note = calls.check_settings(2, 30, 0.1, "mean", "static", "greedy", 0.7, 0.95, 0, 64, "efficient", "<b>m</b>")
    assert note.startswith("⚠️") and "<b>" not in note and "'<b>m</b>'" in read(note)
    refused = list(calls.compare("hi", model="<b>m</b>[x](http://e.example)"))[0][0]
    assert refused.startswith("⚠️") and "<b>" not in refused and "'<b>m</b>[x](http://e.example)'" in read(refused)


# ---------------------------------------------------------------- the lecture

SCRIPT = "</script><script>window.pwned=1</script>"
PROMPT = "{{frames}} {{plotly}} {{title}} <script>window.pwned=2</script>\u2028<!--"


def crafted_run() -> tuple[dict, list]:
    session = Session()
    calls.open_shipped("trace_copy", session)
    meta = {**session.meta, "prompt": PROMPT, "model": "<img src=x onerror=window.pwned=3>"}
    steps = [copy.deepcopy(s) for s in session.steps]
    for s in steps:
        s.emitted_text = [SCRIPT] * len(s.emitted)
        s.nodes[0].text = SCRIPT
    return meta, steps


def test_a_lecture_from_a_crafted_trace_holds_no_injection():
    meta, steps = crafted_run()
    page = lecture_html(steps, meta, {"tree (step 1)": go.Figure(layout={"title": {"text": SCRIPT}})})
    assert page.count("<script") == _PAGE.count("<script") and page.count("</script") == _PAGE.count("</script")
    assert "<script>window.pwned" not in page and "<img" not in page
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", page, re.S)
    assert not any("\u2028" in body or "<!--" in body for body in scripts)  # a JS line end, an HTML comment
    # The prompt's placeholders stay as written, once, in the prompt line; each template slot was filled once.
    assert page.count("{{frames}} {{plotly}} {{title}}") == 1
    assert "<p><b>Prompt:</b> {{frames}} {{plotly}} {{title}} &lt;script&gt;" in page
    run = json.loads(re.search(r'id="esp-run">(.*?)</script>', page, re.S).group(1))
    # Each token as it is, for the player to write with textContent; a note about it, escaped for innerHTML.
    assert [t[0] for t in run["frames"][1]["tokens"]] == [SCRIPT] * len(steps[1].emitted)
    assert html.escape(SCRIPT, quote=False) in run["frames"][1]["tokens"][0][3]
    figures = json.loads(re.search(r'id="esp-figures">(.*?)</script>', page, re.S).group(1))
    assert figures[0]["figure"]["layout"]["title"]["text"] == SCRIPT  # data round-trips unchanged


def test_script_json_and_one_pass_fill():
    assert script_json({"a": "</script>&\u2028"}) == '{"a": "\\u003c/script\\u003e\\u0026\\u2028"}'
    assert json.loads(script_json({"a": "</script>&\u2028"})) == {"a": "</script>&\u2028"}
    assert fill("{{a}}|{{b}}", {"a": "{{b}}", "b": "x"}) == "{{b}}|x"


def test_every_step_of_a_crafted_trace_renders(tmp_path):
    """The crafted trace opens with every step's frame (escaping breaks none), and each step answers alone."""
    session = Session()
    assert len(calls.open_trace(crafted_trace(tmp_path), session)[1]["frames"]) == len(session.steps)
    for i in range(len(session.steps)):
        assert calls.show_step(session, i)[1]["frames"][str(i)]["tree"]
