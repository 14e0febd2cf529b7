"""Which device ``GGML_OPENVINO_DEVICE`` selects, exactly as upstream decides (unset: ``CPU``; not an
exact member of the physical ids: ``CPU`` with upstream's fallback line), logged as upstream logs
it; beyond upstream, a near miss (wrong case, ``GPU`` for ``GPU.0``) carries a hint."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ovkit import layouts
from ovkit.config import OvkitConfig, read_config, readable, shown
from ovkit.devices import ENV_DEVICE, DeviceClass, device_class, is_virtual
from ovkit.layouts import DEFAULT_LAYOUT, get_layout, resolve_for
from ovkit.report import Report, Reported
from ovkit.runtime import Core, get_core

if TYPE_CHECKING:
    from ovkit.ops.policy import SupportDecision

logger = logging.getLogger("ovkit")

DEFAULT_DEVICE = "CPU"
FALLBACK_WARNING = "GGML OpenVINO Backend: device {} is not available, fallback to CPU"
USING_DEVICE = "OpenVINO: using device {}"
# GGML_OPENVINO_LOG_UNSUPPORTED_OPS: the backend's line for each op supports_op rejects
UNSUPPORTED_OP = "OpenVINO op unsupported: op '{}' ({}), type {}: {}"


@dataclass(frozen=True, slots=True, repr=False)
class Selection(Reported):
    """The outcome of resolving ``GGML_OPENVINO_DEVICE`` against the available devices (shown as a
    few lines: the device, why, what was available; ``config`` keeps the full parsed settings)."""

    requested: str | None
    device: str
    fell_back: bool
    hint: str | None
    available: tuple[str, ...]
    config: OvkitConfig
    layout: str = DEFAULT_LAYOUT  #: the device layout whose selection rule decided

    @property
    def device_class(self) -> DeviceClass:
        return device_class(self.device)

    @property
    def messages(self) -> list[str]:
        """The lines upstream writes to stderr, in order (a long or unprintable requested value
        quoted and cut, see ``fallback_message``)."""
        lines = [fallback_message(self.requested or DEFAULT_DEVICE)] if self.fell_back else []
        return lines + [USING_DEVICE.format(self.device)]

    def report(self) -> Report:
        if self.requested is None:
            why = f"{ENV_DEVICE} unset: the default"
        elif self.fell_back:
            why = f"{ENV_DEVICE}={shown(self.requested)} is not available: fell back"
        else:
            why = f"{ENV_DEVICE}={shown(self.requested)}"
        rows = [("device", f"{self.device} ({self.device_class})"), ("because", why)]
        rows.append(("available", ", ".join(self.available) or "none"))
        if self.hint:
            rows.append(("hint", self.hint))
        settings = [f"{k}={readable(v)}" for k, v in sorted(self.config.raw.items()) if k != ENV_DEVICE]
        rows.append(("other settings", ", ".join(settings) or "none set (defaults)"))
        rows += [("note", str(issue)) for issue in self.config.issues]
        return Report(f"selected device: {self.device}", ("", ""), tuple(rows))


def fallback_message(requested: str) -> str:
    """Upstream's fallback line for ``requested``, byte for byte when the value is short and
    printable; otherwise quoted, escaped and cut, so a stray value cannot flood the terminal."""
    return FALLBACK_WARNING.format(readable(requested))


def near_miss_hint(requested: str, available: list[str]) -> str | None:
    """A hint naming the id to use when ``requested`` almost matches one; else None."""
    physical = layouts.physical(available)
    stripped = requested.strip()
    if stripped != requested and stripped in physical:
        return f"remove the surrounding white space: use {stripped!r}"
    folded = [d for d in physical if d.casefold() == stripped.casefold()]
    if folded:
        return f"device ids are case-sensitive: use {folded[0]!r}"
    numbered = sorted(d for d in physical if d.casefold().startswith(stripped.casefold() + "."))
    if numbered:
        return f"this machine lists numbered devices: use {' or '.join(map(repr, numbered))}"
    if is_virtual(stripped.upper()):
        return f"virtual devices are not accepted by the backend: use one of {', '.join(map(repr, physical))}"
    return None


def resolve_device(
    env: Mapping[str, str] | None = None,
    *,
    core: Core | None = None,
    log: bool = True,
    layout: str = DEFAULT_LAYOUT,
) -> Selection:
    """Resolve ``GGML_OPENVINO_DEVICE`` (from ``env``, default ``os.environ``) on ``core`` by the
    selection rule of ``layout`` (``ovkit.layouts.LAYOUTS``): seed and master fall back to CPU,
    the fork raises ``ovkit.layouts.BackendAbort`` naming the available devices."""
    config = read_config(env)
    core = get_core(core)
    available = list(core.available_devices)
    wanted = config.device_requested or DEFAULT_DEVICE
    device, fell_back = resolve_for(get_layout(layout), config.device_requested, core=core)
    hint = near_miss_hint(wanted, available) if fell_back else None
    selection = Selection(config.device_requested, device, fell_back, hint, tuple(available), config, layout)
    if log:
        if fell_back:
            logger.warning(fallback_message(wanted))
            if hint:
                logger.info("hint: %s", hint)
        logger.info(USING_DEVICE.format(selection.device))
    return selection


@contextlib.contextmanager
def using_device(name: str, *, core: Core | None = None) -> Iterator[Selection]:
    """For a block, the selection ``GGML_OPENVINO_DEVICE=name`` makes; ``os.environ`` is left as it
    is, so other threads never see a device they did not ask for."""
    yield resolve_device({**os.environ, ENV_DEVICE: name}, core=core)


class Backend:
    """Execution bound to the one selected device: other devices support no op (the backend drives one device)."""

    def __init__(self, selection: Selection, *, core: Core | None = None) -> None:
        self.selection = selection
        self.core = get_core(core)

    @property
    def device(self) -> str:
        return self.selection.device

    def supports_op(self, device_name: str, op: Any) -> SupportDecision:
        """The op-support decision for ``op`` on ``device_name`` (False off the selected device),
        each rejection logged as the backend logs it with ``GGML_OPENVINO_LOG_UNSUPPORTED_OPS``."""
        from ovkit.ops.policy import SupportDecision, check_op

        if device_name != self.selection.device:
            decision = SupportDecision(
                False, f"device {device_name} is not the selected device {self.selection.device}"
            )
        else:
            decision = check_op(op, self.selection.device_class)
        if not decision.supported and self.selection.config.log_unsupported_ops:
            info = op.op_info() if callable(getattr(op, "op_info", None)) else op
            name, kind, dtype = (getattr(info, key, None) for key in ("name", "op", "dtype"))
            logger.warning(UNSUPPORTED_OP.format(name or "", kind, dtype, decision.reason))
        return decision
