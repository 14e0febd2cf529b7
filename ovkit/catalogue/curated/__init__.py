"""The curated op cases as one table, each tagged with its sets: ``test-ops`` (:mod:`.testops`),
``ggml`` (:mod:`.vs_ggml`, :mod:`.llama_block`) and ``perf`` (:mod:`.perf`), named as
test-backend-ops names cases; nothing is built at import."""

from __future__ import annotations

import functools
from dataclasses import replace

from ovkit.catalogue.case import Case
from ovkit.catalogue.curated.build import BUILDER_OP, GGML, PERF, SETS, TEST_OPS, param, relabel

__all__ = ["BUILDER_OP", "GGML", "PERF", "SETS", "TEST_OPS", "cases", "find", "param", "relabel"]


@functools.cache
def _table() -> tuple[Case, ...]:
    from ovkit.catalogue.curated import perf, testops, vs_ggml

    merged: dict[str, Case] = {}
    for tag, made in ((TEST_OPS, testops.cases()), (GGML, vs_ggml.cases()), (PERF, perf.cases())):
        for c in made:  # a case in several sets is one row with their tags
            old = merged[c.name].tags if c.name in merged else frozenset()
            merged[c.name] = replace(c, tags=old | c.tags | {tag})
    return tuple(merged.values())


def cases(tag: str | None = None) -> tuple[Case, ...]:
    """The curated cases of set ``tag`` (every case when None), in table order."""
    if tag is not None and tag not in SETS:
        raise ValueError(f"case set {tag!r} is not known (expected one of: {', '.join(SETS)})")
    return tuple(c for c in _table() if tag is None or tag in c.tags)


def find(name: str) -> Case:
    """The curated case called ``name``; KeyError naming it when unknown."""
    for c in _table():
        if c.name == name:
            return c
    raise KeyError(f"no curated case named {name!r}")
