"""Every text path of the dashboard with hostile store texts: nothing the store holds becomes markup.

The browser half (the texts rendered by BokehJS in headless Chromium, nothing executed) is
``test_hostile_texts_render_as_text_and_never_run`` in tests/test_dashboard_browser.py. Here, without a
browser: the Bokeh document built over a store whose task ids, value labels, range attribute names,
methods, dead-letter reasons and summary keys and values are all hostile
(``pipelines.dashboard_app.simulated.HOSTILE_TEXTS``), walked model by model.
"""

from __future__ import annotations

import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from bokeh.document import Document
from bokeh.models import (
    DataTable,
    HoverTool,
    Markup,
    MultiChoice,
    NumberFormatter,
    Select,
    StringFormatter,
)

from pipelines.dashboard_app import shape
from pipelines.dashboard_app.app import Dashboard
from pipelines.dashboard_app.simulated import HOSTILE_TEXTS, open_writer, write_hostile_tasks

#: The only elements the dashboard's own markup uses.
OWN_TAGS = {
    "style", "h2", "span", "code", "table", "tr", "th", "td", "b", "details", "summary", "br", "div", "p"
}


class _Markup(HTMLParser):
    """Collects the elements, attributes and text of an HTML fragment."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend(name for name, _ in attrs)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(markup: str) -> _Markup:
    parser = _Markup()
    parser.feed(markup)
    parser.close()
    return parser


def _assert_own_markup(markup: str, where: str) -> str:
    """Checks ``markup`` holds only the dashboard's own elements and no event handler; returns its text."""
    parsed = _parse(markup)
    assert set(parsed.tags) <= OWN_TAGS, (where, set(parsed.tags) - OWN_TAGS)
    assert not [a for a in parsed.attrs if a.lower().startswith("on")], (where, parsed.attrs)
    return " ".join(parsed.text)


@pytest.fixture
def hostile_url(tmp_path: Path) -> tuple[str, dict[str, str]]:
    url = f"sqlite:///{tmp_path}/estimates.db"
    writer = open_writer(url)
    try:
        ids = write_hostile_tasks(writer, int(time.time() * 1000))
    finally:
        writer.close()
    return url, ids


def test_html_text_escapes_markup_and_quotes():
    assert shape.html_text("<img src=x onerror='a'>") == "&lt;img src=x onerror=&#x27;a&#x27;&gt;"
    assert shape.html_text('"&') == "&quot;&amp;"
    assert shape.html_text(None) == "" and shape.html_text(3) == "3"
    for text in HOSTILE_TEXTS:
        assert _parse(shape.html_text(text)).tags == []
        assert "".join(_parse(shape.html_text(text)).text) == text  # shown as the very text


def _check_document(doc: Document, shown: list[str]) -> None:
    """Walks every model of ``doc``: markup texts, widget options, tooltips, table formatters."""
    texts = []
    for model in doc.models:
        if isinstance(model, Markup):  # Div, Paragraph, PreText: Div.text is parsed as HTML
            if not getattr(model, "render_as_text", False):
                texts.append(_assert_own_markup(model.text, model.name or type(model).__name__))
        elif isinstance(model, MultiChoice):  # Choices.js sets innerHTML from the labels
            for opt in model.options:
                label = opt if isinstance(opt, str) else opt[1]
                assert _parse(label).tags == [], label
                texts.append("".join(_parse(label).text))
        elif isinstance(model, Select):  # BokehJS builds <option> text nodes: raw text is safe and right
            texts.extend(o if isinstance(o, str) else o[1] for o in model.options)
        elif isinstance(model, HoverTool):  # (label, "@field") tuples: BokehJS escapes the field values
            assert isinstance(model.tooltips, list), model.tooltips
            assert not any("{safe}" in value for _, value in model.tooltips), model.tooltips
        elif isinstance(model, DataTable):  # StringFormatter renders a text node; HTML formatters do not
            for col in model.columns:
                assert type(col.formatter) in (StringFormatter, NumberFormatter), col.formatter
    joined = "\n".join(texts)
    for text in shown:
        assert text in joined, (text, joined[:2000])


def test_every_text_path_of_the_document_shows_hostile_store_texts_as_text(hostile_url):
    url, ids = hostile_url
    doc = Document()
    dash = Dashboard(doc, url, task=ids["frequency"], refresh=1.0, top_k=10)
    assert "data-state='live'" in dash.status.text, dash.status.text
    names = dash.topk_source.data["name"]
    assert any(HOSTILE_TEXTS[0] in n for n in names) and any(HOSTILE_TEXTS[1] in n for n in names)
    assert dash.budget.visible  # the run summary's figures (hostile keys) are on the page
    shown = [ids["frequency"], *(f"{t} #{i}" for i, t in enumerate(HOSTILE_TEXTS)), HOSTILE_TEXTS[1]]
    shown.append(f"run {HOSTILE_TEXTS[3]} live")  # the run id, in the freshness line
    _check_document(doc, shown)  # task id, labels (table, series box), method, budget, run id
    assert set(dash.reasons["reason"]) == set(HOSTILE_TEXTS)
    assert all(shape.html_text(t) in dash.reasons_table.text for t in HOSTILE_TEXTS)  # escaped cells

    dash.task_select.value = ids["range"]  # the range task: hostile attribute names in the query texts
    assert dash.topk_source.data["item"] == [0, 1, 2, 3]
    assert dash.topk_source.data["name"][0] == f"#0: {HOSTILE_TEXTS[0]} in [0, 3], age in [0, 9]"
    _check_document(doc, [ids["range"], *(f"{t} in [{q}, {q + 3}]" for q, t in enumerate(HOSTILE_TEXTS))])


def test_status_and_error_texts_are_escaped(tmp_path: Path):
    dash = Dashboard(Document(), f"sqlite:///{tmp_path}/<b>nowhere</b>/e.db")
    assert "data-state='error'" in dash.status.text
    assert "<b>" not in dash.status.text and "&lt;b&gt;nowhere" in dash.status.text
    assert "<b>" not in dash.header.text


def test_stored_numbers_that_are_text_are_escaped():
    """A store the project did not write may hold text where a figure belongs: it is shown escaped."""
    from pipelines.dashboard_app.markup import fmt as _fmt

    assert _fmt("<img src=x onerror=alert(1)>") == "&lt;img src=x onerror=alert(1)&gt;"
    assert _fmt(0.5) == "0.5000" and _fmt(12345, spec=",") == "12,345" and _fmt(None) == "-"
