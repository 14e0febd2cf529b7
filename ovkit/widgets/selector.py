"""Device selector: pick the device ``GGML_OPENVINO_DEVICE`` names and see what it resolves to."""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping
from typing import Any

import ipywidgets as widgets

from ovkit.devices import physical_device_ids
from ovkit.layouts import LAYOUTS
from ovkit.report import Report
from ovkit.runtime import Core
from ovkit.selection import ENV_DEVICE, Selection, resolve_device
from ovkit.widgets.data import error_text
from ovkit.widgets.saved import SavedPictureMixin

UNSET = "(unset)"


def set_device_env(value: str | None, env: MutableMapping[str, str] | None = None) -> None:
    """Set (or, for None/empty, unset) ``GGML_OPENVINO_DEVICE`` in ``env`` (default: this process,
    whose engines then read their configuration again)."""
    target = os.environ if env is None else env
    if value:
        target[ENV_DEVICE] = value
    else:
        target.pop(ENV_DEVICE, None)
    if env is None:
        from ovkit.engine import reload_engines

        reload_engines()


def state_report(selection: Selection | None, requested: str | None = None, error: str = "") -> Report:
    """The variable and the device it resolves to, the backend's lines (the fallback warning, the
    hint), and whose rule decided; or why ``requested`` could not be resolved."""
    requested = selection.requested if selection is not None else requested
    title = f"{ENV_DEVICE} = {UNSET if requested is None else repr(requested)}"
    if selection is None:
        return Report(title, notes=(f"error: {error}",))
    hint = (f"  hint: {selection.hint}",) if selection.hint else ()
    layout = selection.layout
    rule = f"{layout} layout: an unknown device means {LAYOUTS[layout].selection.on_unknown}"
    lines = (*(f"  {m}" for m in selection.messages), *hint, f"  ({rule})")
    return Report(f"{title} -> {selection.device}", notes=lines)


class DeviceSelector(SavedPictureMixin, widgets.VBox):
    """A dropdown of the devices plus a free-text box; choosing sets the variable and re-resolves."""

    def __init__(
        self,
        *,
        core: Core | None = None,
        env: MutableMapping[str, str] | None = None,
        on_change: Callable[[Selection | None], None] | None = None,
        **kwargs: Any,
    ) -> None:
        self.core = core
        self.env = env
        self._on_change = on_change
        self._syncing = False
        self.state: Selection | None = None  # sync() sets it (None: it could not resolve, see error)
        self.error = ""
        try:
            devices = physical_device_ids(core)
        except Exception:
            devices = []  # only the free-text box then; sync() below shows the resolution
        self.dropdown = widgets.Dropdown(options=[UNSET, *devices], description="Device")
        self.text = widgets.Text(
            placeholder="or type any value, e.g. gpu",
            description="or value",
            continuous_update=False,
        )
        self.status = widgets.HTML(value="")
        self.dropdown.observe(self._on_dropdown, names="value")
        self.text.observe(self._on_text, names="value")
        self.row = widgets.HBox([self.dropdown, self.text])
        super().__init__([self.row, self.status], **kwargs)
        self.add_class("ovkit-selector")
        self.sync()

    def _current_env(self) -> MutableMapping[str, str]:
        return os.environ if self.env is None else self.env

    def select(self, value: str | None) -> Selection | None:
        """Set ``GGML_OPENVINO_DEVICE`` to ``value`` (None/"" unsets it) and re-resolve."""
        set_device_env(value, self.env)
        return self.sync()

    def sync(self) -> Selection | None:
        """Re-read the variable, resolve it, and update the controls and the status line."""
        requested = self._current_env().get(ENV_DEVICE) or None
        try:
            self.state, self.error = resolve_device(self._current_env(), log=False, core=self.core), ""
        except Exception as exc:
            self.state, self.error = None, error_text(exc)
        self._syncing = True
        try:
            value = (self.state.requested if self.state else requested) or UNSET
            if value in self.dropdown.options:
                self.dropdown.value = value
                self.text.value = ""
            else:  # a typed value: no dropdown entry matches it
                self.dropdown.value = None
                self.text.value = value
        finally:
            self._syncing = False
        self.status.value = self._repr_html_()
        if self._on_change is not None:
            self._on_change(self.state)
        self.save_picture()
        return self.state

    def _on_dropdown(self, change: dict[str, Any]) -> None:
        if not self._syncing:
            self.select(None if change["new"] == UNSET else change["new"])

    def _on_text(self, change: dict[str, Any]) -> None:
        if not self._syncing and change["new"]:
            self.select(change["new"])

    def report(self) -> Report:
        requested = self._current_env().get(ENV_DEVICE) or None
        return state_report(self.state, requested, self.error)
