"""The devices as tables: a compact styled one for notebooks (MiB, usage bars, the memory rule
per row) and a raw DataFrame with every byte column and error.  Discovery is :mod:`ovkit.devices`'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ovkit import layouts
from ovkit.devices import Device, list_devices
from ovkit.escape import css_string, html_text
from ovkit.memory import MIB
from ovkit.runtime import Core

if TYPE_CHECKING:
    import pandas as pd
    from pandas.io.formats.style import Styler
    from pandas.io.formats.style_render import CSSDict


def _raw_row(d: Device) -> dict[str, Any]:
    """Every field of the device but its raw properties, and the live figures the views show."""
    row = {k: v for k, v in d.to_dict().items() if k not in ("properties", "memory_breakdown")}
    live = d.live
    return row | {
        "live_used_bytes": live.used_bytes,
        "live_free_bytes": live.free_bytes,
        "memory_rule": live.rule.label,
    }


# The compact table's columns: header -> (Device -> value).  Figures are the live ones
# (``Device.live``), so the table, the bars, the charts and the fit check agree.
COMPACT_COLUMNS: dict[str, Callable[[Device], Any]] = {
    "simulated": lambda d: d.simulated,
    "class": lambda d: str(d.device_class),
    "description": lambda d: d.description,
    "total MiB": lambda d: None if d.live.total_bytes is None else d.live.total_bytes / MIB,
    "used MiB": lambda d: None if d.live.used_bytes is None else d.live.used_bytes / MIB,
    "free MiB": lambda d: None if d.live.free_bytes is None else d.live.free_bytes / MIB,
    "usage": lambda d: d.live.usage,
    "rule": lambda d: d.live.rule.label if d.live.known else f"unknown: {d.live.error}",
}
TABLE_STYLES: list[CSSDict] = [
    {"selector": "", "props": "font-size: 12px; border-collapse: collapse;"},
    {"selector": "caption", "props": "text-align: left; font-weight: bold; padding-bottom: 4px;"},
    {"selector": "th, td", "props": "padding: 2px 8px; white-space: nowrap;"},
    {"selector": "td.col2", "props": "max-width: 260px; overflow: hidden; text-overflow: ellipsis;"},
    {"selector": "td.col7", "props": "max-width: 230px; overflow: hidden; text-overflow: ellipsis;"},
]


def _caption(devices: Sequence[Device], *, core: Core | None) -> str:
    """Whose devices these are, and which device layout lists them (e.g. ``layout: seed (...)``)."""
    if any(d.simulated for d in devices):
        profile = getattr(getattr(core, "profile", None), "name", None)
        name = f" '{profile}'" if profile else ""
        what = f"SIMULATED device set{name} (ovkit.simulate): not this machine's devices"
    else:
        what = "OpenVINO devices of this machine"
    keys = sorted({d.layout for d in devices}) or [layouts.DEFAULT_LAYOUT]
    return f"{what} — " + "; ".join(f"layout: {k} ({layouts.LAYOUTS[k].title})" for k in keys)


def device_table(
    devices: Iterable[Device] | None = None,
    *,
    core: Core | None = None,
    raw: bool = False,
    layout: str = "seed",
) -> Styler | pd.DataFrame:
    """The devices (of ``layout`` when not given) as a compact styled table, or with ``raw=True`` as a
    DataFrame with every byte column and error."""
    import pandas as pd

    listed = list(list_devices(layout, core=core) if devices is None else devices)
    if raw:
        return pd.DataFrame([_raw_row(d) for d in listed]).set_index("name") if listed else pd.DataFrame()
    frame = pd.DataFrame(
        {header: [get(d) for d in listed] for header, get in COMPACT_COLUMNS.items()},
        index=pd.Index([d.name for d in listed], name="device"),
    )
    # pandas writes cells, row headers and the caption into HTML, and each tooltip into a CSS
    # string in the table's <style> block, all as given: every one is escaped for its place.
    tips = pd.DataFrame("", index=frame.index, columns=frame.columns)
    tips["rule"] = [css_string(d.live.explain()) for d in listed]
    tips["description"] = [css_string(d.description) for d in listed]

    def mib(v: Any) -> str:
        return f"{int(v):,}"  # whole MiB, floored as --list-devices prints them

    def simulated(v: Any) -> str:
        return "SIMULATED" if v else "no"

    return (
        frame.style.format(
            {"simulated": simulated, "total MiB": mib, "used MiB": mib, "free MiB": mib, "usage": "{:.0%}"},
            na_rep="unknown",
            escape="html",
        )
        .format_index(escape="html", axis="index")
        .format_index(escape="html", axis="columns")
        .bar(subset=["usage"], vmin=0.0, vmax=1.0, color="#4c9be8", height=60, width=100)
        .set_properties(subset=["class", "description", "rule"], **{"text-align": "left"})
        .set_caption(html_text(_caption(listed, core=core)))
        .set_table_styles(TABLE_STYLES)
        .hide(names=True, axis="index")
        .set_tooltips(tips)
    )
