"""Device selector: pick the device ``GGML_OPENVINO_DEVICE`` names and see what it resolves to."""

from __future__ import annotations

import os
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets

from ovkit.devices import physical_device_ids
from ovkit.layouts import DEFAULT_LAYOUT, LAYOUTS
from ovkit.report import Report
from ovkit.runtime import Core
from ovkit.selection import ENV_DEVICE, Selection, resolve_device
from ovkit.widgets.data import error_text
from ovkit.widgets.saved import SavedPictureMixin

UNSET = "(unset)"


@dataclass(frozen=True, slots=True)
class SelectorState:
    """What the selector shows: the variable's value and its resolution (or why it failed)."""

    requested: str | None
    device: str | None
    fell_back: bool
    messages: tuple[str, ...]
    hint: str | None
    error: str | None = None
    layout: str = DEFAULT_LAYOUT  #: whose selection rule decided (``ovkit.layouts.LAYOUTS``)


def selector_state(selection: Selection) -> SelectorState:
    """The selector's view of one resolution."""
    s = selection
    return SelectorState(s.requested, s.device, s.fell_back, tuple(s.messages), s.hint, layout=s.layout)


def layout_line(state: SelectorState) -> str:
    """Which layout's selection rule the state shows, and what it does with an unknown device."""
    return f"{state.layout} layout: an unknown device means {LAYOUTS[state.layout].selection.on_unknown}"


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


def state_report(state: SelectorState) -> Report:
    """The variable and the device it resolves to, the backend's lines (the fallback warning, the
    hint), and whose rule decided; or why it could not be resolved."""
    shown = UNSET if state.requested is None else repr(state.requested)
    if state.error:
        return Report(f"{ENV_DEVICE} = {shown}", notes=(f"error: {state.error}",))
    hint = (f"  hint: {state.hint}",) if state.hint else ()
    lines = (*(f"  {m}" for m in state.messages), *hint, f"  ({layout_line(state)})")
    return Report(f"{ENV_DEVICE} = {shown} -> {state.device}", notes=lines)


class DeviceSelector(SavedPictureMixin, widgets.VBox):
    """A dropdown of the devices plus a free-text box; choosing sets the variable and re-resolves."""

    def __init__(
        self,
        *,
        core: Core | None = None,
        env: MutableMapping[str, str] | None = None,
        on_change: Callable[[SelectorState], None] | None = None,
        **kwargs: Any,
    ) -> None:
        self.core = core
        self.env = env
        self._on_change = on_change
        self._syncing = False
        self.state: SelectorState = SelectorState(None, None, False, (), None)  # sync() sets it
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

    def select(self, value: str | None) -> SelectorState:
        """Set ``GGML_OPENVINO_DEVICE`` to ``value`` (None/"" unsets it) and re-resolve."""
        set_device_env(value, self.env)
        return self.sync()

    def sync(self) -> SelectorState:
        """Re-read the variable, resolve it, and update the controls and the status line."""
        try:
            state = selector_state(resolve_device(self._current_env(), log=False, core=self.core))
        except Exception as exc:
            current = self._current_env().get(ENV_DEVICE) or None
            state = SelectorState(current, None, False, (), None, error=error_text(exc))
        self.state = state
        self._syncing = True
        try:
            value = state.requested or UNSET
            if value in self.dropdown.options:
                self.dropdown.value = value
                self.text.value = ""
            else:  # a typed value: no dropdown entry matches it
                self.dropdown.value = None
                self.text.value = value
        finally:
            self._syncing = False
        self.status.value = state_report(state)._repr_html_()
        if self._on_change is not None:
            self._on_change(state)
        self.save_picture()
        return state

    def _on_dropdown(self, change: dict[str, Any]) -> None:
        if not self._syncing:
            self.select(None if change["new"] == UNSET else change["new"])

    def _on_text(self, change: dict[str, Any]) -> None:
        if not self._syncing and change["new"]:
            self.select(change["new"])

    def report(self) -> Report:
        return state_report(self.state)
