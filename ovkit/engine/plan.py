"""Graph plans: what one ``Graph.compute`` signature needs on every call after the first
(structure key, input slots, output conversion), and stateful graph sessions."""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit.devices import DeviceClass, device_class
from ovkit.dtypes import NUMPY_DTYPE
from ovkit.ir import GraphError, from_model_output

if TYPE_CHECKING:
    import pandas as pd
from ovkit.engine.errors import EngineError
from ovkit.engine.run_config import (
    DEFAULT_RUN_CONFIG,
    GRAPH_RUN_CONFIG,
    GRAPH_TINY_RUN_CONFIG,
    TINY_ELEMENTS,
    EffectiveConfig,
    RunConfig,
    run_config_from,
)
from ovkit.engine.runner import CompiledGraph, Runner, _dims


# ---------------------------------------------------------------------------------------------
# ovkit.graph.Graph through the engine: a cached plan per (outputs, device, config).
# ---------------------------------------------------------------------------------------------
def _value_digest(value: Any) -> str:
    """Bytes of a constant (numpy array or quantized weight) for the structure key."""
    if value is None:
        return ""
    if isinstance(value, np.ndarray):
        return hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
    digest = getattr(value, "digest", None)  # quantized weights: blocks + type + shape + form
    if isinstance(digest, str):
        return digest
    for attr in ("raw", "blocks", "data"):
        raw = getattr(value, attr, None)
        if isinstance(raw, bytes | bytearray | memoryview):
            return hashlib.sha256(bytes(raw)).hexdigest() + ":" + str(getattr(value, "form", ""))
        if isinstance(raw, np.ndarray):
            return hashlib.sha256(np.ascontiguousarray(raw).tobytes()).hexdigest()
    return f"object:{id(value)}"  # unknown value type: equal only to itself


def graph_structure_key(graph: Any, outputs: Sequence[Any]) -> str:
    """A digest of what ``outputs`` compute: per node op, sub-op, ne, nb, dtype, view offset,
    params, wiring, input names and constant bytes (generated ids are not part of it)."""
    nodes = graph.topo(list(outputs))
    pos = {t.id: i for i, t in enumerate(nodes)}
    h = hashlib.sha256()
    for t in nodes:
        srcs = tuple(-1 if s is None else pos[s.id] for s in t.srcs)
        view, after = (-1 if d is None else pos[d.id] for d in (t.view_src, t.after))
        params = sorted((k, repr(v)) for k, v in (t.params or {}).items())
        name = t.name if t.is_input else ""
        edges = (srcs, view, after)
        h.update(
            repr((t.op, t.sub_op, t.ne, t.nb, t.dtype, t.view_offs, params, edges, t.is_input, name)).encode()
        )
        if t.value is not None:
            h.update(_value_digest(t.value).encode())
    h.update(repr([pos[o.id] for o in outputs]).encode())
    return h.hexdigest()


class _InputSlot:
    """One graph input: how a fed array becomes the model's 4-D Parameter value."""

    __slots__ = ("alt_shapes", "dtype", "gdtype", "last", "name", "param_shape", "shape")

    def __init__(self, leaf: Any) -> None:
        self.name: str = leaf.name
        self.gdtype: str = leaf.dtype
        self.dtype = np.dtype(NUMPY_DTYPE[leaf.dtype])
        self.shape: tuple[int, ...] = tuple(leaf.shape)
        self.param_shape: tuple[int, ...] = tuple(reversed(leaf.ne))
        # (caller's array, its Parameter view): one attribute, so threads swap it atomically
        self.last: tuple[Any, Any] = (None, None)
        # Other numpy shapes of the same ggml tensor (e.g. (1, 512) for ne [512, 1, 1, 1]),
        # learnt when Graph's own input checks accepted them.
        self.alt_shapes: set[tuple[int, ...]] = set()

    def convert(self, value: Any) -> np.ndarray | None:
        """The Parameter view of ``value`` (same memory when possible); None → slow path."""
        last = self.last
        if value is last[0]:
            view: np.ndarray = last[1]
            return view
        if (
            type(value) is not np.ndarray
            or value.dtype != self.dtype
            or (value.shape != self.shape and value.shape not in self.alt_shapes)
            or self.gdtype == "bf16"
            or not value.flags.c_contiguous
        ):
            return None
        view = value.reshape(self.param_shape)
        self.last = (value, view)
        return view


class GraphPlan:
    """What one ``Graph.compute`` signature needs on every call after the first."""

    def __init__(
        self,
        graph: Any,
        outputs: Sequence[Any],
        device: str,
        run: RunConfig,
        *,
        extra_outputs: Sequence[Any] = (),
        names: Sequence[str] | None = None,
    ) -> None:
        self.graph = graph
        self.outputs = tuple(outputs)  # strong refs: ids in the plan key stay valid
        self.extra_outputs = tuple(extra_outputs)
        self.every = [*self.outputs, *self.extra_outputs]  # what the model computes
        self.device = device
        self.run = run
        leaves = graph.inputs_of(self.every)
        self.slots = [_InputSlot(t) for t in leaves]
        self.input_names = [t.name for t in leaves]
        self.known = {t.name for t in graph.nodes if t.is_input}
        self.output_names = list(names) if names else [f"output{i}" for i in range(len(self.outputs))]
        # (engine generation, weak reference to the compiled graph)
        self.hot: tuple[int, weakref.ref[CompiledGraph]] | None = None
        self.structure = graph_structure_key(graph, self.every)
        self._out_specs = [
            (tuple(o.shape), None if o.dtype == "bf16" else np.dtype(NUMPY_DTYPE.get(o.dtype, np.float32)))
            for o in self.outputs
        ]

    def check_support(self) -> None:
        """Raise ``UnsupportedOpError`` for the first op the device's policy rejects."""
        self.graph.check_supported(self.every, self.device)

    def factory(self) -> Any:
        """Build the OpenVINO model (called on a compile miss only); outputs get stable names."""
        model, names = self.graph.to_model(self.every, self.input_names)
        if list(names) != self.input_names:
            raise EngineError(f"to_model returned Parameters {names}, expected {self.input_names}")
        for port, name in zip(model.outputs, self.output_names, strict=True):
            port.get_tensor().set_names({name})
        if self.extra_outputs:  # state outputs take their input's (4-D Parameter) shape
            import openvino.opset16 as ops

            params = {p.get_friendly_name(): p for p in model.get_parameters()}
            n = len(self.outputs)
            for port, name in zip(model.outputs[n:], self.output_names[n:], strict=True):
                target = params[name.split(":", 1)[1]].get_partial_shape()
                result = port.get_node()
                shaped = ops.reshape(result.input_value(0), np.array(_dims(target), np.int64), False)
                result.input(0).replace_source_output(shaped.output(0))
                result.output(0).get_tensor().set_names({name})
            model.validate_nodes_and_infer_types()
        return model

    def feed(self, inputs: Mapping[str, Any], skip: Iterable[str] = ()) -> list[np.ndarray]:
        """The Parameter values in order; any mismatch goes through Graph's own checks/errors."""
        out: list[np.ndarray] = []
        skipped = set(skip)
        try:
            for slot in self.slots:
                if slot.name in skipped:
                    continue
                view = slot.convert(inputs[slot.name])
                if view is None:
                    raise LookupError(slot.name)
                out.append(view)
        except LookupError:
            prepared = self.graph._prepare_inputs(
                self.every,
                {**{s.name: np.zeros(s.shape, s.dtype) for s in self.slots if s.name in skipped}, **inputs},
            )
            for s in self.slots:  # accepted: remember the spelling of each shape for the fast path
                if s.name in inputs and len(s.alt_shapes) < 8:
                    s.alt_shapes.add(tuple(np.shape(inputs[s.name])))
            return [prepared[s.name] for s in self.slots if s.name not in skipped]
        if len(inputs) > len(out):
            unknown = sorted(set(inputs) - self.known)
            if unknown:
                raise GraphError(
                    f"compute: unknown inputs {unknown}; this graph's inputs are {sorted(self.known)}"
                )
        return out

    def results(self, raw: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Model outputs in each output Tensor's numpy shape and dtype."""
        if len(raw) == 1:
            (shape, dtype), r = self._out_specs[0], raw[0]
            return [r.reshape(shape) if r.dtype == dtype else from_model_output(self.outputs[0], r)]
        return [
            r.reshape(shape) if r.dtype == dtype else from_model_output(o, r)
            for o, r, (shape, dtype) in zip(self.outputs, raw, self._out_specs, strict=False)
        ]


def _config_key(config: Mapping[str, Any] | RunConfig | None) -> Hashable:
    if config is None or isinstance(config, RunConfig):
        return config
    return tuple(sorted((str(k), str(v)) for k, v in config.items()))


def _resolve_run(
    config: Mapping[str, Any] | RunConfig | None, graph: Any, outs: Sequence[Any], device: str
) -> RunConfig:
    """The RunConfig of a plan: the caller's, else ovkit's default for the graph's size (the
    thread count is a CPU-plugin property: other device classes get the plain default)."""
    if isinstance(config, RunConfig):
        return config
    if config is not None:
        return run_config_from(config, GRAPH_RUN_CONFIG)
    dclass = device_class(device)
    if dclass == DeviceClass.NPU:
        return DEFAULT_RUN_CONFIG  # the NPU computes in f16 and may refuse an f32 hint: its default
    if dclass != DeviceClass.CPU:
        return GRAPH_RUN_CONFIG
    biggest = max((int(np.prod(t.ne)) for t in graph.topo(list(outs))), default=0)
    return GRAPH_TINY_RUN_CONFIG if biggest < TINY_ELEMENTS else GRAPH_RUN_CONFIG


_PLAN = "ovkit.engine.plan"  # the tag of the engine's entries in ``graph.derived``
MAX_PLANS_PER_GRAPH = 64  # output sets x devices x configs one graph keeps plans for


class GraphSession:
    """A ``Graph`` with state: each state input is fed from the output that holds its next value
    (OpenVINO variables when stateful, host round-trip otherwise), e.g. a KV cache."""

    def __init__(self, plan: GraphPlan, runner: Runner, states: Mapping[str, str]) -> None:
        self.plan = plan
        self.runner = runner
        self.states = dict(states)

    @property
    def stateful(self) -> bool:
        return self.runner.graph.stateful

    @property
    def effective(self) -> EffectiveConfig:
        return self.runner.graph.effective

    def compute(self, inputs: Mapping[str, Any] | None = None) -> list[np.ndarray]:
        """Run once with the non-state inputs; states advance."""
        feed = self.plan.feed(inputs or {}, skip=self.states)
        return self.plan.results(self.runner.run(feed))

    def state(self, name: str) -> np.ndarray:
        """The current value of state ``name`` in the input's numpy shape."""
        slot = next(s for s in self.plan.slots if s.name == name) if name in self.states else None
        value = self.runner.state(name)
        return value.reshape(slot.shape) if slot is not None else value

    def set_state(self, name: str, value: Any) -> None:
        arr = np.asarray(value)
        slot = next((s for s in self.plan.slots if s.name == name), None)
        if slot is not None and arr.shape == slot.shape:
            arr = arr.reshape(slot.param_shape)
        self.runner.set_state(name, arr)

    def reset_state(self, name: str | None = None) -> None:
        self.runner.reset_state(name)

    def profile(self) -> pd.DataFrame:
        return self.runner.profile()
