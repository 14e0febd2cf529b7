"""Writing quantized tensors (CPY / SET_ROWS into quantized rows): how ggml's CPU ``from_float``
quantizes each writable type (``ovkit.ops.formulas.quantized_write`` computes it)."""

from __future__ import annotations

from dataclasses import dataclass

from ovkit.dtypes import WRITABLE_QUANT_TYPES
from ovkit.quant.specs import QuantError, quant_spec


@dataclass(frozen=True, slots=True)
class RoundTrip:
    """How ggml's CPU ``from_float`` quantizes one 32-element block: symmetric (Q4_0, Q5_0) about
    ``offset``, or from the block's minimum; ``levels`` the largest integer (Q8_0: 127)."""

    symmetric: bool
    offset: int
    levels: int


#: The quantized types an op may write, each as ggml's CPU backend quantizes it.
ROUND_TRIPS: dict[str, RoundTrip] = {
    "q4_0": RoundTrip(True, 8, 15),
    "q4_1": RoundTrip(False, 0, 15),
    "q5_0": RoundTrip(True, 16, 31),
    "q5_1": RoundTrip(False, 0, 31),
    "q8_0": RoundTrip(False, 0, 127),
}
assert tuple(ROUND_TRIPS) == WRITABLE_QUANT_TYPES, "ovkit.dtypes lists the types specified here"


def round_trip_spec(qtype: str) -> RoundTrip:
    """The :class:`RoundTrip` of ``qtype``; QuantError for a type ovkit does not write."""
    spec = quant_spec(qtype)
    rt = ROUND_TRIPS.get(spec.name)
    if rt is None:
        raise QuantError(
            f"writing {spec.name} values (ggml's from_float) is not reproduced; expected one of {', '.join(WRITABLE_QUANT_TYPES)}"
        )
    return rt
