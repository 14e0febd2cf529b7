"""Axis ranges and units for the live charts, as plain data (the browser only draws them): an axis
grows at once and shrinks only after the data stayed well below its top for a while (hysteresis);
units go by magnitude (a few GiB in MiB, 32 GiB in GiB)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ovkit.memory import MIB, unit_for

NICE_STEPS: tuple[float, ...] = (1.0, 2.0, 2.5, 5.0, 10.0)
HEADROOM = 0.15  # the top sits this far above the data
SHRINK_BELOW = 0.4  # data under this fraction of the top counts toward a shrink
SHRINK_AFTER = 20  # ... for this many consecutive updates
MIN_TOP = 4 * MIB  # an empty series still gets a 0..4 MiB axis
TICKS = 4


def nice_step(raw: float) -> float:
    """The smallest 1/2/2.5/5 x 10^k that is >= ``raw`` (> 0)."""
    if raw <= 0 or not math.isfinite(raw):
        raise ValueError(f"axis step {raw!r}: expected a finite number > 0")
    exp = math.floor(math.log10(raw))
    base = 10.0**exp
    return next(s * base for s in NICE_STEPS if s * base >= raw * (1 - 1e-12))


def tick_digits(step: float) -> int:
    """Decimals that label every multiple of ``step`` exactly (2.5 -> 1, 0.25 -> 2, 200 -> 0)."""
    return next((d for d in range(4) if abs(step * 10**d - round(step * 10**d)) < 1e-9), 3)


@dataclass(frozen=True, slots=True)
class Axis:
    """A value axis from 0 to ``top`` bytes with ticks every ``step`` bytes, labelled in ``unit``."""

    top: float
    step: float
    unit: str
    scale: int
    low_updates: int = 0  # consecutive updates with the data far below ``top``

    def ticks(self) -> list[tuple[float, str]]:
        """``(bytes, label)`` for 0, step, ..., top."""
        n = round(self.top / self.step)
        digits = tick_digits(self.step / self.scale)
        return [(i * self.step, f"{i * self.step / self.scale:,.{digits}f}") for i in range(n + 1)]

    def as_list(self) -> list[float]:
        """``[top, step, scale]``: what crosses to the browser (numbers only)."""
        return [self.top, self.step, float(self.scale)]


def fit_axis(needed: float) -> Axis:
    """The smallest nice axis whose top is >= ``needed`` bytes (labelled in MiB at the least)."""
    needed = max(float(needed), MIN_TOP)
    unit, scale = max(unit_for(needed), ("MiB", MIB), key=lambda u: u[1])
    step = nice_step(needed / scale / TICKS) * scale
    return Axis(math.ceil(needed / step - 1e-9) * step, step, unit, scale)


def next_axis(data_max: float, previous: Axis | None) -> Axis:
    """The axis for ``data_max`` bytes given the one shown before: grow at once, shrink late."""
    if not math.isfinite(data_max) or data_max < 0:
        data_max = 0.0
    wanted = data_max * (1 + HEADROOM)
    if previous is None or data_max > previous.top:
        return fit_axis(wanted)
    if data_max >= previous.top * SHRINK_BELOW:
        return previous if previous.low_updates == 0 else dataclasses.replace(previous, low_updates=0)
    if previous.low_updates + 1 >= SHRINK_AFTER:
        return fit_axis(wanted)
    return dataclasses.replace(previous, low_updates=previous.low_updates + 1)
