"""The engine's bounded LRU of compiled graphs and its counters."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from ovkit.engine.keys import CacheKey
from ovkit.engine.runner import CompiledGraph
from ovkit.escape import html_text


@dataclass(frozen=True, slots=True)
class CacheStats:
    """The compiled-graph cache counters (``compile_seconds`` sums every compile, cached or not)."""

    hits: int
    misses: int
    evictions: int
    compiles: int
    compile_seconds: float
    size: int
    maxsize: int
    enabled: bool
    plans: int = 0  # graph plans made (policy check, structure key, input slots)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def __str__(self) -> str:
        entries = f"entries {self.size} of {self.maxsize}" if self.enabled else "disabled"
        return (
            f"compiled-graph cache: hits {self.hits}, misses {self.misses} ({self.hit_rate:.0%} hit rate), "
            f"evictions {self.evictions}, compiles {self.compiles} in {self.compile_seconds * 1e3:,.1f} ms, "
            f"{entries}"
        )

    def _repr_html_(self) -> str:
        return f"<code>{html_text(self)}</code>"


class CompiledCache:
    """Compiled graphs by key, least recently used first, with hit/miss/eviction/compile counts.
    Not locked itself: the engine holds its lock around every change."""

    def __init__(self, maxsize: int) -> None:
        self.entries: OrderedDict[CacheKey, CompiledGraph] = OrderedDict()
        self.maxsize = maxsize
        self.reset_counts()

    def reset_counts(self) -> None:
        self.hits = self.misses = self.evictions = self.compiles = self.plans = 0
        self.compile_seconds = 0.0

    def get(self, key: CacheKey) -> CompiledGraph | None:
        """The entry of ``key`` made most recent (a hit), or None."""
        entry = self.entries.get(key)
        if entry is not None:
            self.entries.move_to_end(key)
            self.hits += 1
        return entry

    def put(self, entry: CompiledGraph) -> None:
        self.entries[entry.key] = entry
        self.resize(self.maxsize)

    def resize(self, maxsize: int) -> None:
        """Change the bound, evicting the least recently used entries beyond it."""
        self.maxsize = maxsize
        while len(self.entries) > maxsize:
            self.entries.popitem(last=False)
            self.evictions += 1

    def discard(self, keys: Iterable[CacheKey]) -> None:
        for key in keys:
            self.entries.pop(key, None)

    def stats(self, enabled: bool) -> CacheStats:
        return CacheStats(
            self.hits,
            self.misses,
            self.evictions,
            self.compiles,
            self.compile_seconds,
            len(self.entries),
            self.maxsize,
            enabled,
            self.plans,
        )
