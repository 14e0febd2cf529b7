"""Host weight-buffer release (``GGML_OPENVINO_RELEASE_WEIGHTS`` / ``GGML_OPENVINO_MEMORY_OPTIMIZE``):
the first cache hit with release on gives every registered weight buffer's pages back (they read
back as zeros); a later compile raises :class:`WeightsReleasedError` with upstream's message."""

from __future__ import annotations

import logging
import mmap
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from ovkit.config import OvkitConfig, read_config
from ovkit.devices import device_class
from ovkit.errors import OvkitError
from ovkit.memory import MIB

logger = logging.getLogger("ovkit.weight_release")

PAGE_SIZE = mmap.PAGESIZE
MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", 4)

#: upstream's error texts (utils.cpp:324-329, ggml-openvino.cpp:362-367); the text after
#: "released via ..." / "compiled graph." is ovkit's explanation of what to do.
RECOMPILE_MESSAGE = (
    "ggml-openvino: a new graph needs to be compiled but host weight buffers were already released "
    "via GGML_OPENVINO_RELEASE_WEIGHTS/GGML_OPENVINO_MEMORY_OPTIMIZE. "
    "Unset both variables (or keep the graph shapes of the first run) to compile new graphs."
)
NEW_MODEL_MESSAGE = (
    "ggml-openvino: loading a new model while GGML_OPENVINO_RELEASE_WEIGHTS pinned a previous model's "
    "compiled graph. Unset GGML_OPENVINO_RELEASE_WEIGHTS/GGML_OPENVINO_MEMORY_OPTIMIZE to load several models."
)
LOG_FORMAT = "ggml_openvino_release_weight_buffers: released %zu MB of host weight buffers (%zu buffers)"


class WeightsReleasedError(OvkitError, RuntimeError):
    """A recompile or a new model after the host weight pages were given back to the OS."""


@dataclass(frozen=True, slots=True)
class ReleaseResult:
    """What one release did: bytes given back (page-aligned), buffers, and the log line."""

    released_bytes: int
    buffers: int
    message: str
    device: str


@dataclass(slots=True)
class _Entry:
    address: int
    size: int
    owner: weakref.ref[Any]  # the storage, weakly: a dropped buffer must not stay registered

    def live_owner(self) -> Any:
        """The storage when it still holds its pages, else None."""
        owner = self.owner()
        return None if owner is None or getattr(owner, "freed", False) else owner


def page_range(address: int, size: int, page: int = PAGE_SIZE) -> tuple[int, int]:
    """The page-aligned range inside ``[address, address+size)``: (start, length ≥ 0)."""
    start = (address + page - 1) // page * page
    end = (address + size) // page * page
    return start, max(0, end - start)


class WeightReleaseRegistry:
    """The process-global registry of host weight buffers and the released state."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[int, _Entry] = {}  # by id() of the storage
        self.released = False
        self.last: ReleaseResult | None = None

    # -- registration ----------------------------------------------------------------------------
    def register(self, buffer: Any) -> bool:
        """Register an ovkit host Buffer holding weights (True if newly registered); a
        :class:`WeightsReleasedError` when weights were released already."""
        storage = getattr(buffer, "storage", buffer)
        if getattr(storage, "remote", False):
            return False  # remote (device) buffers have no host pages
        size = int(storage.size)
        if size == 0:
            return False
        with self._lock:
            if self.released:
                raise WeightsReleasedError(NEW_MODEL_MESSAGE)
            entry = self._entries.get(id(storage))
            if entry is not None and entry.live_owner() is storage:
                return False
            self._prune()
            # id() is unique only while the storage lives: a dead entry under the same key is replaced
            self._entries[id(storage)] = _Entry(int(storage.address), size, weakref.ref(storage))
            return True

    def _prune(self) -> None:
        """Drop entries whose storage was freed (they hold no pages); caller holds the lock."""
        for key in [k for k, e in self._entries.items() if e.live_owner() is None]:
            del self._entries[key]

    def unregister(self, buffer: Any) -> None:
        """Forget a buffer (called when it is freed); unknown buffers are ignored."""
        storage = getattr(buffer, "storage", buffer)
        with self._lock:
            entry = self._entries.get(id(storage))
            if entry is not None and entry.owner() is storage:
                del self._entries[id(storage)]

    @property
    def count(self) -> int:
        with self._lock:
            self._prune()
            return len(self._entries)

    # -- hooks for the engine --------------------------------------------------------------------
    def on_cache_hit(self, device: str, config: OvkitConfig | None = None) -> ReleaseResult | None:
        """Call on every cache hit: the first one with release enabled gives the pages back."""
        cfg = config if config is not None else read_config(warn=False)
        if self.released or not cfg.release_weights(str(device_class(device))):
            return None
        return self.release(device)

    def before_compile(self, device: str | None = None) -> None:
        """Call before compiling a graph: after a release there is nothing left to compile from."""
        if self.released:
            raise WeightsReleasedError(RECOMPILE_MESSAGE)

    # -- release ---------------------------------------------------------------------------------
    def release(self, device: str = "") -> ReleaseResult:
        """madvise(MADV_DONTNEED) every registered buffer (inward page-aligned); mark released."""
        with self._lock:
            if self.released and self.last is not None:
                return self.last
            total = count = 0
            for e in self._entries.values():
                owner = e.live_owner()
                start, length = page_range(e.address, e.size)
                # a buffer freed meanwhile has no pages left; upstream releases nothing on Windows
                if owner is None or length == 0 or os.name == "nt":
                    continue
                owner.mmap.madvise(MADV_DONTNEED, start - e.address, length)
                total += length
                count += 1
            self.released = True
            message = LOG_FORMAT.replace("%zu", "{}", 2).format(total // MIB, count)
            logger.info(message)
            self.last = ReleaseResult(total, count, message, device)
            return self.last

    def reset(self) -> None:
        """Forget everything (tests and notebooks; upstream has no way back)."""
        with self._lock:
            self._entries.clear()
            self.released = False
            self.last = None


REGISTRY = WeightReleaseRegistry()
#: The process-global registry's hooks: buffers register their weights, the engine calls the
#: release on a cache hit and the check before a compile, tests and notebooks reset it.
register_weight_buffer = REGISTRY.register
on_cache_hit = REGISTRY.on_cache_hit
before_compile = REGISTRY.before_compile
reset = REGISTRY.reset
