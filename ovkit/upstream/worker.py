"""The child side of :mod:`ovkit.upstream.isolate`, the only code that calls the real backend: JSON
requests naming a command (:data:`HANDLERS`); an exception becomes ``{"error": ...}``."""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ovkit.catalogue.case import Case

#: ggml's device types, by ``enum ggml_backend_dev_type`` value.
DEVICE_TYPES = ("CPU", "GPU", "IGPU", "ACCEL", "META")

#: The real backend's device, as the backend names it.
DEVICE_NAME = "OPENVINO0"


class Backend:
    """ggml-python loaded with its OpenVINO backend: the device and one backend instance."""

    def __init__(self) -> None:
        import openvino  # noqa: F401  (libggml-openvino.so links libopenvino: load it first)

        # isort: split
        import ggml

        self.g = ggml
        self.dev = ggml.ggml_backend_dev_by_name(DEVICE_NAME.encode())
        if not self.dev:
            n = ggml.ggml_backend_dev_count()
            names = [_text(ggml.ggml_backend_dev_name(ggml.ggml_backend_dev_get(i))) for i in range(n)]
            raise RuntimeError(f"ggml has no device {DEVICE_NAME} (devices: {names})")
        self._backend: Any = None

    @property
    def backend(self) -> Any:
        """The backend instance, created on first use (it starts OpenVINO's Core)."""
        if self._backend is None:
            self._backend = self.g.ggml_backend_dev_init(self.dev, None)
            if not self._backend:
                raise RuntimeError(f"ggml_backend_dev_init({DEVICE_NAME}) returned NULL")
        return self._backend

    def supports(self, tensor: Any) -> bool:
        return bool(self.g.ggml_backend_dev_supports_op(self.dev, tensor))

    def verdicts(self, tensors: Any) -> list[dict[str, Any]]:
        """``supports_op`` of each tensor, with its op, name and shape (ggml order)."""
        return [{"op": _text(self.g.ggml_op_desc(t)), "name": _text(t.contents.name),
                 "ne": [int(x) for x in t.contents.ne], "supported": self.supports(t)} for t in tensors]  # fmt: skip


def _text(b: bytes | str | None) -> str:
    return b.decode(errors="replace") if isinstance(b, bytes) else str(b or "")


# -- Handlers --------------------------------------------------------------------------------------


def _info(be: Backend, req: Mapping[str, Any]) -> dict[str, Any]:
    g = be.g
    regs = [
        _text(g.ggml_backend_reg_name(g.ggml_backend_reg_get(i))) for i in range(g.ggml_backend_reg_count())
    ]
    return {
        "ggml_version": _text(g.ggml_version()),
        "ggml_commit": _text(g.ggml_commit()),
        "registries": regs,
    }


def _devices(be: Backend, req: Mapping[str, Any]) -> dict[str, Any]:
    g = be.g
    out = []
    for i in range(g.ggml_backend_dev_count()):
        dev = g.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        g.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = int(g.ggml_backend_dev_type(dev))
        out.append({"index": i, "name": _text(g.ggml_backend_dev_name(dev)),
                    "description": _text(g.ggml_backend_dev_description(dev)),
                    "memory_free": int(free.value), "memory_total": int(total.value),
                    "type": DEVICE_TYPES[kind] if kind < len(DEVICE_TYPES) else str(kind),
                    "registry": _text(g.ggml_backend_reg_name(g.ggml_backend_dev_backend_reg(dev)))})  # fmt: skip
    return {"devices": out}


def _crash(be: Backend, req: Mapping[str, Any]) -> dict[str, Any]:
    """``supports_op(NULL)``: the backend reads ``op->op`` without a check (SIGSEGV)."""
    return {"supported": be.supports(None)}


def _three_way_reply(be: Backend, case: Case, inputs: dict[str, Any], compute: bool) -> dict[str, Any]:
    """supports_op per tensor of the case's graph, then (all supported) the output judged against
    ggml's CPU backend (``status``, ``nmse``: the case's own error, None when the shapes differ)."""
    from ovkit import oracle
    from ovkit.catalogue.result import judge

    session = oracle.program_session(case.program, inputs, backend=be.backend)
    try:
        nodes = be.verdicts(session.tensors())
        reply: dict[str, Any] = {"nodes": nodes, "supported": all(n["supported"] for n in nodes)}
        if reply["supported"] and compute:
            try:
                session.run()
            except RuntimeError as exc:  # graph_compute returned an error status
                reply["compute_error"] = str(exc)
                return reply
            actual = np.asarray(session.results()[0])
            verdict = judge(case, actual, oracle.ggml_program(case.program, inputs), "ggml")
            reply.update(shape=list(actual.shape), status=verdict.status, nmse=verdict.err)
    finally:
        session.close()
    return reply


def _case(be: Backend, req: Mapping[str, Any]) -> dict[str, Any]:
    """An ``ovkit test-ops`` case on the real backend (:func:`_three_way_reply`), with the
    request's ``shapes`` and ``dtype`` when the op explorer changed them."""
    from ovkit.upstream import cases

    c = cases.vary(cases.find_case(req["name"]), req.get("shapes"), req.get("dtype"))
    return _three_way_reply(be, c, cases.ggml_inputs(c), req.get("compute", True))


def _catalogue_case(be: Backend, req: Mapping[str, Any]) -> dict[str, Any]:
    """A test-backend-ops catalogue case (``op``, ``params``) on the real backend, drawn and judged
    as ``ovkit test-ops --catalogue test-backend-ops`` does."""
    from ovkit.catalogue import backend_ops
    from ovkit.catalogue.case import draw_all, ggml_inputs

    c = backend_ops.build(req["op"], req["params"])
    return _three_way_reply(be, c, ggml_inputs(c, draw_all(c)), req.get("compute", True))


def _bench(be: Backend, req: Mapping[str, Any]) -> dict[str, Any]:
    """Seconds per compute of a case on the real backend (graph built once, run repeatedly)."""
    from ovkit import oracle
    from ovkit.upstream import cases

    c = cases.find_case(req["name"])
    res = oracle.ggml_benchmark_program(
        c.program,
        cases.ggml_inputs(c),
        n_runs=int(req["runs"]),
        warmup=int(req.get("warmup", 1)),
        backend=be.backend,
    )
    return {"median_s": res.median_s, "min_s": res.min_s, "runs": len(res.times_s)}


def _support_rows(be: Backend, req: Mapping[str, Any]) -> dict[str, Any]:
    """``supports_op`` on the output node of test-backend-ops cases rebuilt as ggml tensors."""
    from ovkit.upstream.tensors import Unbuildable, build_tensor

    out: list[dict[str, Any]] = []
    for op_name, op_params in req["rows"]:
        try:
            with build_tensor(be.g, op_name, op_params) as t:
                out.append({"supported": be.supports(t)})
        except Unbuildable as exc:
            out.append({"skip": str(exc)})
    return {"rows": out}


def _model_graph(be: Backend, req: Mapping[str, Any]) -> dict[str, Any]:
    """``supports_op`` per node of a GGUF model's graph for one shape bucket (ovkit's own program)."""
    from ovkit import oracle
    from ovkit.model.placement import ggml_graph_program

    program, inputs = ggml_graph_program(req["path"], req["shape"], int(req["start"]))
    session = oracle.program_session(program, inputs, backend=be.backend)
    try:
        g = be.g
        nodes = [g.ggml_graph_node(session.graph, i) for i in range(g.ggml_graph_n_nodes(session.graph))]
        return {"nodes": be.verdicts(nodes)}
    finally:
        session.close()


HANDLERS: dict[str, Callable[[Backend, Mapping[str, Any]], dict[str, Any]]] = {
    "info": _info,
    "devices": _devices,
    "crash": _crash,
    "case": _case,
    "catalogue_case": _catalogue_case,
    "bench": _bench,
    "support_rows": _support_rows,
    "model_graph": _model_graph,
}


def answer(line: str, state: dict[str, Backend]) -> str:
    """The JSON reply to one request line (an exception's first line as ``{"error": ...}``)."""
    try:
        req = json.loads(line)
        handler = HANDLERS.get(req.get("cmd", ""))
        if handler is None:
            raise ValueError(f"unknown request {req.get('cmd')!r}; expected one of {sorted(HANDLERS)}")
        be = state.get("backend") or state.setdefault("backend", Backend())
        reply = handler(be, req)
    except Exception as exc:
        text = str(exc).strip()
        reply = {"error": f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"}
    return json.dumps(reply)


def main() -> None:
    from ovkit.child import serve

    state: dict[str, Backend] = {}  # the backend, loaded by the first request that needs it
    serve(lambda line: answer(line, state))


if __name__ == "__main__":
    main()
