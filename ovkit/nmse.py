"""test-backend-ops' judgement of a result: the normalized mean squared error exactly as its C
loop computes it (:func:`nmse`) and its per-node check (:func:`compare`: NaN, then inf, then the
NMSE against the op's threshold, :attr:`ovkit.ops.table.OpEntry.max_nmse`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import dropwhile

import numpy as np


def nmse(actual: np.ndarray, expected: np.ndarray) -> float:
    """test-backend-ops' mse(actual, expected) / mse(actual, 0): f32 differences and squares summed
    in order in f64, divided with IEEE semantics (an all-zero ``actual`` gives inf or NaN)."""
    a = np.asarray(actual).astype(np.float32).ravel()
    b = np.asarray(expected).astype(np.float32).ravel()
    if a.size != b.size:
        raise ValueError(f"nmse: element counts differ: actual {a.size} vs expected {b.size}")
    if a.size == 0:
        return float("nan")
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        d = a - b
        num = np.cumsum((d * d).astype(np.float64))[-1]  # cumsum: the C loop's sequential order
        den = np.cumsum((a * a).astype(np.float64))[-1]
        return float(np.float64(num) / np.float64(den))


_FLT_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True, slots=True)
class Comparison:
    """The verdict of :func:`compare`: ok, the NMSE, the threshold, and why it failed."""

    ok: bool
    err: float
    max_err: float
    reason: str = ""

    def __str__(self) -> str:
        state = "OK" if self.ok else f"FAIL ({self.reason})"
        return f"NMSE = {self.err:.3e} (max {self.max_err:.1e}) {state}"


def compare(actual: np.ndarray, expected: np.ndarray, max_err: float = 1e-7) -> Comparison:
    """test-backend-ops' per-node check: NaN → fail; inf (or ±FLT_MAX) must match in sign on both
    sides; then NMSE must not exceed ``max_err`` (a NaN NMSE from matching infs passes, as in C)."""
    a = np.asarray(actual).astype(np.float32).ravel()
    b = np.asarray(expected).astype(np.float32).ravel()
    if a.size != b.size:
        return Comparison(False, float("inf"), max_err, f"element counts differ: {a.size} vs {b.size}")
    nan = np.isnan(a) | np.isnan(b)
    if nan.any():
        i = int(np.argmax(nan))
        return Comparison(False, float("nan"), max_err, f"NaN at index {i} (actual={a[i]}, expected={b[i]})")
    inf_a = np.isinf(a) | (np.abs(a) == _FLT_MAX)
    inf_b = np.isinf(b) | (np.abs(b) == _FLT_MAX)
    bad = (inf_a != inf_b) | (inf_a & inf_b & (np.signbit(a) != np.signbit(b)))
    if bad.any():
        i = int(np.argmax(bad))
        return Comparison(
            False, float("inf"), max_err, f"inf mismatch at index {i} (actual={a[i]}, expected={b[i]})"
        )
    err = nmse(a, b)
    if err > max_err:  # NaN (inf - inf) compares False, as in test-backend-ops
        return Comparison(False, err, max_err, f"NMSE {err:.3e} > {max_err:.1e}")
    return Comparison(True, err, max_err)


def same_ne(shape_a: Sequence[int], shape_b: Sequence[int]) -> bool:
    """True when two numpy-order shapes are the same ggml tensor (leading numpy dims of 1 ignored)."""
    a, b = (list(dropwhile(lambda d: d == 1, map(int, s))) for s in (shape_a, shape_b))
    return a == b
