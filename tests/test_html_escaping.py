"""Device strings with markup in them reach HTML, CSS and JS as text, never as markup.

A plugin's FULL_DEVICE_NAME, a device id, an error message or a simulation profile's name may hold
``</style>``, ``</script>``, ``<img onerror>``, quotes, backslashes and newlines.  Every output
ovkit emits is parsed the way a browser parses it (``html.parser`` ends ``<style>`` and
``<script>`` at their end tags as a browser does); no element or event handler may come from the
strings, every CSS string must stay one string, and the text a person sees is the original.
"""

from __future__ import annotations

import json
import logging
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from widget_helpers import GIB

import ovkit
from ovkit.escape import css_string, html_attr, html_text
from ovkit.notebook import memory_report
from ovkit.notebook_log import render
from ovkit.selection import ENV_DEVICE
from ovkit.simulate import DeviceProfile, Failure, Profile, SimulatedCore
from ovkit.widgets import AllocationCharts, DeviceSelector, DeviceTable
from ovkit.widgets.op_explorer import OpRun, runs_report, verdicts_report

ATTACK = "<img src=x onerror=alert(1)>"
# every character that can end an element, a CSS string or an attribute, and a second line
NAME = f"cpu </style>{ATTACK} \"quoted\" 'single' back\\slash </script><script>alert(2)</script>\nline two"
DEVICE_ID = f"GPU.</style>{ATTACK}"
ERROR = f'driver </style></script>{ATTACK} said "no"\\'
PROFILE_NAME = f"lab </style>{ATTACK}"

HOSTILE = Profile(
    PROFILE_NAME,
    "devices whose strings hold markup",
    (
        DeviceProfile("CPU", {"FULL_DEVICE_NAME": NAME}),
        DeviceProfile(
            DEVICE_ID,
            {
                "FULL_DEVICE_NAME": NAME,
                "GPU_DEVICE_TOTAL_MEM_SIZE": Failure(ERROR),
                "GPU_MEMORY_STATISTICS": {},
            },
        ),
    ),
    host_total_bytes=16 * GIB,
    host_available_bytes=8 * GIB,
)

ES_MODULE = Path(ovkit.__file__).parent / "widgets" / "static" / "memory_view.js"
# the DOM calls that parse a string as markup or code
# Markup a script parses: writing innerHTML/outerHTML (reading outerHTML serializes the drawn DOM,
# escaped, for the saved picture), insertAdjacentHTML, document.write, eval, new Function.
JS_MARKUP_SINKS = re.compile(
    r"(?:innerHTML|outerHTML)\s*\+?=(?!=)|insertAdjacentHTML|document\.write|\beval\(|new Function"
)


class Parsed(HTMLParser):
    """An HTML string as a browser reads it: elements, visible text, and the bodies of <style>."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.styles: list[str] = []
        self._in_style = False
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        (self.styles if self._in_style else self.text).append(data)

    @property
    def visible(self) -> str:
        return "".join(self.text)

    def attribute_values(self) -> list[str]:
        return [v for _, attrs in self.elements for v in attrs.values() if v]


def css_unescape(body: str) -> str:
    """The text a browser shows for the inside of a CSS string."""
    pattern = r"\\([0-9a-fA-F]{1,6})[ \t\n]?|\\\n|\\(.)"
    return re.sub(pattern, lambda m: chr(int(m[1], 16)) if m[1] else (m[2] or ""), body, flags=re.DOTALL)


def css_strings(css: str) -> list[str]:
    """The text of every ``content:`` declaration, each of which must be exactly one CSS string."""
    values = re.findall(r"content:(.*?);\s*\n\s*\}", css, flags=re.DOTALL)
    for value in values:
        assert re.fullmatch(r'\s*"(?:[^"\\\n]|\\[^\n])*"\s*', value), f"not one CSS string: {value!r}"
    return [css_unescape(v.strip()[1:-1]) for v in values]


def inert(markup: str) -> Parsed:
    """``markup`` parsed, after checking that the strings added no element and no handler."""
    parsed = Parsed(markup)
    made = [
        (tag, attrs)
        for tag, attrs in parsed.elements
        if tag in {"script", "iframe", "object", "svg"}
        or (tag == "img" and not str(attrs.get("src")).startswith("data:image/png;base64,"))  # charts
    ]
    assert made == []
    handlers = [name for _, attrs in parsed.elements for name in attrs if name.startswith("on")]
    assert handlers == []
    return parsed


@pytest.fixture
def core() -> SimulatedCore:
    return SimulatedCore(HOSTILE)


# -- the styled table of ovkit.device_table() ------------------------------------------------
def test_device_table_shows_markup_as_text(core: SimulatedCore) -> None:
    styler = ovkit.device_table(core=core)
    page = inert(styler.to_html())
    assert page.visible.count(NAME) == 2  # both descriptions, newline and all
    assert DEVICE_ID in page.visible  # the row header
    assert f"SIMULATED device set '{PROFILE_NAME}'" in page.visible  # the caption
    assert ERROR in page.visible  # the GPU's rule: unknown, with the driver's message
    # the hover tooltips are CSS strings in the <style> block: each stays one string, the same text
    (css,) = page.styles
    tips = css_strings(css)
    assert tips.count(NAME) == 2
    assert any(ERROR in tip for tip in tips)
    assert styler._repr_html_() is not None and ATTACK not in styler._repr_html_()


def test_device_table_raw_frame_escapes_too(core: SimulatedCore) -> None:
    frame = ovkit.device_table(raw=True, core=core)
    assert frame.loc["CPU", "description"] == NAME  # the data keeps the original string
    inert(frame._repr_html_())  # what a cell shows (long strings cut)
    page = inert(frame.to_html())
    assert DEVICE_ID in page.visible and ERROR in page.visible
    assert NAME.replace("\n", "\\n") in page.visible  # pandas shows the newline as \n


# -- widgets' HTML fallbacks, notebook helpers and log lines ---------------------------------
def test_live_table_and_charts_fallbacks(core: SimulatedCore) -> None:
    table = DeviceTable(auto_refresh=False, core=core)
    charts = AllocationCharts(auto_refresh=False, core=core)
    try:
        page = inert(table._repr_html_())
        assert page.visible.count(NAME) == 2 and DEVICE_ID in page.visible and ERROR in page.visible
        table._show_error_text(ERROR)  # a failed refresh, shown in the status line and the view
        assert ERROR in inert(table._repr_html_()).visible
        assert ERROR in inert(table.controls.status.value).visible
        charts._show_error_text(ERROR)
        assert ERROR in inert(charts._repr_html_()).visible
    finally:
        table.close()
        charts.close()


def test_selector_and_dashboard_fallbacks(core: SimulatedCore) -> None:
    env = {ENV_DEVICE: NAME}  # a typed value: the resolution names it and falls back
    selector = DeviceSelector(env=env, core=core)
    board = ovkit.dashboard(auto_refresh=False, op_explorer=False, env=env, core=core)
    try:
        assert repr(NAME) in inert(selector.status.value).visible
        page = inert(board._repr_mimebundle_()["text/html"])
        assert repr(NAME) in page.visible and DEVICE_ID in page.visible and ERROR in page.visible
    finally:
        selector.close()
        board.close()


def test_op_explorer_results() -> None:
    runs = [
        OpRun(DEVICE_ID, "GPU", True, True, "FAIL", detail=ERROR, nmse=1.0, max_nmse=1e-7, reference="ggml"),
        OpRun("CPU", "CPU", False, False, "not supported", detail=NAME),
    ]
    page = inert(runs_report(runs)._repr_html_())
    assert DEVICE_ID in page.visible and ERROR in page.visible and NAME in page.visible
    page = inert(verdicts_report([(DEVICE_ID, False, ERROR), (NAME, True, "")])._repr_html_())
    assert DEVICE_ID in page.visible and ERROR in page.visible and NAME in page.visible


def test_notebook_report_and_log_lines(core: SimulatedCore) -> None:
    page = inert(memory_report(ovkit.list_devices(core=core), title=PROFILE_NAME)._repr_html_())
    assert PROFILE_NAME in page.visible and DEVICE_ID in page.visible and ERROR in page.visible
    record = logging.LogRecord("ovkit", logging.WARNING, __file__, 1, "device %s: %s", (NAME, ERROR), None)
    assert f"device {NAME}: {ERROR}" in inert(render(record)["text/html"]).visible


# -- the browser-drawn views: raw text in the payload, DOM text APIs in the module -----------
def test_live_view_payload_carries_the_text_and_the_module_never_parses_it(core: SimulatedCore) -> None:
    table = DeviceTable(auto_refresh=False, core=core)
    try:
        devices = table.view.meta["devices"]
        # raw, not escaped: the module shows it with textContent (escaping here would show "&lt;")
        assert [d["name"] for d in devices] == ["CPU", DEVICE_ID]
        assert [d["description"] for d in devices] == [NAME, NAME]
        assert any(ERROR in e for e in devices[1]["errors"])
    finally:
        table.close()
    module = ES_MODULE.read_text()
    assert JS_MARKUP_SINKS.findall(module) == []
    assert "textContent" in module and "setAttribute" in module


# -- the escaping functions themselves -------------------------------------------------------
@pytest.mark.parametrize("text", [NAME, ERROR, DEVICE_ID, "", "ünïcødé \u2028 tab\there", "a  \\3c b"])
def test_css_string_reads_back_as_the_text_and_holds_no_markup(text: str) -> None:
    body = css_string(text)
    assert css_unescape(body) == text
    assert re.fullmatch(r"[A-Za-z0-9 \\\-_.,;:()%+=#!?@'/]*", body), body
    assert css_strings(f'x {{\n  content: "{body}";\n}}') == [text]


def test_html_escapes_read_back_as_the_text() -> None:
    page = inert(f"<p title=\"{html_attr(NAME)}\" data-x='{html_attr(NAME)}'>{html_attr(NAME)}</p>")
    assert page.visible == NAME
    assert page.elements == [("p", {"title": NAME, "data-x": NAME})]
    text = html_text(NAME)
    assert inert(f"<p>{text}</p>").visible == NAME
    assert "'single'" in text  # quotes are plain text between tags


# -- in a real browser: nothing runs, the text shows ------------------------------------------
@pytest.mark.browser
def test_chromium_draws_the_text_and_runs_nothing(core: SimulatedCore) -> None:
    """The styled table, the HTML fallback and the ES module's table in Chromium: no script
    runs, no image loads, and the cells, tooltips and rows show the strings as they are."""
    import playwright.sync_api as playwright_sync
    from browser_lab import CHROMIUM, CHROMIUM_ARGS

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    styled = ovkit.device_table(core=core).to_html()
    table = DeviceTable(auto_refresh=False, core=core)
    try:
        fallback = table._repr_html_()
        payload = json.loads(json.dumps({"meta": table.view.meta, "tick": table.view.tick}))
    finally:
        table.close()
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page()
            dialogs: list[str] = []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.set_content(
                f'<div id="styled">{styled}</div><div id="fallback">{fallback}</div><div id="live"></div>'
            )
            # the ES module as JupyterLab loads it, rendering into a stand-in for the widget model
            module = ES_MODULE.read_text() + "\nwindow.ovkitView = { render };\n"
            page.add_script_tag(content=module, type="module")
            page.wait_for_function("window.ovkitView !== undefined")
            page.evaluate(
                """state => {
                    const values = {...state, panels: ["table"], history: null};
                    const model = {get: (k) => values[k], on: () => {}, off: () => {}};
                    window.ovkitView.render({model, el: document.getElementById("live")});
                }""",
                payload,
            )
            page.wait_for_timeout(200)  # an onerror of a broken <img> would have fired by now
            assert dialogs == []
            assert page.locator("img, iframe").count() == 0
            assert page.locator("script").count() == 1  # the module above, nothing from the strings
            cells = page.locator("#styled td.col2")
            assert cells.evaluate_all("cs => cs.map(c => c.textContent)") == [NAME, NAME]
            tips = cells.evaluate_all(
                "cs => cs.map(c => getComputedStyle(c.querySelector('.pd-t'), '::after').content)"
            )
            assert [css_unescape(t[1:-1]) for t in tips] == [NAME, NAME]
            assert page.locator("#styled th.row_heading").all_text_contents() == ["CPU", DEVICE_ID]
            assert PROFILE_NAME in page.locator("#styled caption").text_content()
            rows = page.locator("#live tr.ovkit-row")
            assert [r.get_attribute("data-device") for r in rows.all()] == ["CPU", DEVICE_ID]
            assert page.locator("#live tr.ovkit-row td:nth-child(3)").all_text_contents() == [NAME, NAME]
            assert ERROR in page.locator("#live tr.ovkit-errrow").first.text_content()
            # the fallback: the table's report, the device id and both descriptions as written
            cells = page.locator("#fallback td").all_text_contents()
            assert f"{DEVICE_ID} (sim)" in cells and cells.count(NAME) == 2
            assert ERROR in page.locator("#fallback").text_content()
        finally:
            browser.close()
