"""SET_ROWS as the real backend sees it: its gates read ggml's sources (b, c, a), not the
builder's argument order (``scripts/install-upstream`` builds the backend in CI)."""

from __future__ import annotations

from ovkit.catalogue.run import Row
from ovkit.ops.policy import Revision
from ovkit.upstream import isolate, ops


def test_set_rows_verdicts_of_the_real_backend_match_the_policy() -> None:
    rows = [
        # a Q4_K destination 256 wide: the ne[0]=256 gate reads src[0], the f32 rows, so it passes
        Row("SET_ROWS", "type_src=f32,type_dst=q4_K,type_idx=i64,ne=[256,5,1,1],nr23=[1,1],r=1,v=0"),
        # a 3-D quantized destination: refused as a 3-D quantized src[2]
        Row("SET_ROWS", "type_src=f32,type_dst=q4_0,type_idx=i64,ne=[32,5,3,1],nr23=[1,1],r=1,v=0"),
    ]
    with isolate.Isolated() as worker:
        results = [ops.three_way_row(r, worker, Revision.P) for r in rows]
    assert [r.upstream_supported for r in results] == [True, False], [r.line() for r in results]
    assert [r.ovkit_supported for r in results] == [True, False], [r.line() for r in results]
    assert all(r.agrees for r in results), [r.line() for r in results]
