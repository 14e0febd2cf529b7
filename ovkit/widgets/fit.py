"""The fit view: ``ovkit check`` in a notebook, a GGUF path and a context in, the verdict per device
and the memory drawing out (``ovkit.preflight``: from the header alone, so any size is quick)."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ovkit.report import figure_png, png_img
from ovkit.runtime import Core
from ovkit.widgets._html import STYLE, FallbackReprMixin, error_box, esc


def render_check_html(result: Any) -> str:
    """The verdict table and the drawing of an ``ovkit.preflight.Preflight``."""
    return f"{STYLE}{result._repr_html_()}{png_img(figure_png(result.plot()), 'memory per device')}"


class FitView(FallbackReprMixin, widgets.VBox):
    """Path, ``-c`` (0: the training context) and a button; the answer below."""

    def __init__(self, path: str = "", n_ctx: int = 4096, *, core: Core | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.core = core
        self.result: Any = None
        self.path = widgets.Text(value=str(path), description="GGUF", placeholder="path of a .gguf file")
        self.n_ctx = widgets.IntText(value=n_ctx, description="-c", layout=widgets.Layout(width="180px"))
        self.button = widgets.Button(description="check", tooltip="ovkit check: from the header alone")
        self.out = widgets.HTML(value="")
        self.button.on_click(lambda _b: self.run())
        self.children = [widgets.HBox([self.path, self.n_ctx, self.button]), self.out]

    def run(self) -> Any:
        """Check the file at the context shown; errors (a bad path, an absurd -c) show in place."""
        from ovkit.preflight import PreflightError, check

        try:
            self.result = check(self.path.value, self.n_ctx.value or None, core=self.core)
        except PreflightError as exc:
            self.result = None
            self.out.value = error_box(str(exc))
            return None
        self.out.value = render_check_html(self.result)
        return self.result

    def fallback_html(self) -> str:
        return self.out.value or f"<p>{esc('ovkit check: no file checked yet')}</p>"

    def fallback_text(self) -> str:
        return str(self.result.report()) if self.result is not None else "ovkit check: no file checked yet"
