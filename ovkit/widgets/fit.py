"""The fit view: ``ovkit check`` in a notebook, a GGUF path and a context in, the verdict per device
and the memory drawing out (``ovkit.preflight``: from the header alone, so any size is quick)."""

from __future__ import annotations

import dataclasses
from typing import Any

import ipywidgets as widgets

from ovkit.report import Report, figure_png
from ovkit.runtime import Core
from ovkit.widgets.saved import SavedPictureMixin


class FitView(SavedPictureMixin, widgets.VBox):
    """Path, ``-c`` (0: the training context) and a button; the answer below."""

    def __init__(self, path: str = "", n_ctx: int = 4096, *, core: Core | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.core = core
        self.shown = Report("ovkit check: no file checked yet")
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
            result = check(self.path.value, self.n_ctx.value or None, core=self.core)
            self.shown = dataclasses.replace(result.report(), png=figure_png(result.plot()))
        except PreflightError as exc:
            result = None
            self.shown = Report("ovkit check", notes=(f"error: {exc}",))
        self.out.value = self._repr_html_()
        self.save_picture()
        return result

    def report(self) -> Report:
        return self.shown
