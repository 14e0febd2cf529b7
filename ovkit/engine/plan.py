"""Graph plans: what one ``Graph.compute`` signature needs on every call after the first (policy
verdict, structure key, input slots, output conversion), and stateful graph sessions.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit.devices import DeviceClass, device_class
from ovkit.dtypes import NUMPY_DTYPE
from ovkit.ir import GraphIR, Tensor, UnsupportedOpError, from_model_output
from ovkit.ops.feed import check_input_names, input_names, prepare_feed
from ovkit.ops.policy import graph_decisions

if TYPE_CHECKING:
    import pandas as pd
from ovkit.engine.keys import CacheKey, graph_structure_key
from ovkit.engine.ov_model import dims
from ovkit.engine.run_config import (
    DEFAULT_RUN_CONFIG,
    GRAPH_RUN_CONFIG,
    GRAPH_TINY_RUN_CONFIG,
    TINY_ELEMENTS,
    EffectiveConfig,
    RunConfig,
    run_config_from,
)
from ovkit.engine.runner import Runner


class InputSlot:
    """One graph input: how a fed array becomes the model's 4-D Parameter value."""

    __slots__ = ("alt_shapes", "dtype", "gdtype", "last", "name", "param_shape", "shape")

    def __init__(self, leaf: Tensor, *, wide: bool = False) -> None:
        self.name: str = leaf.name
        self.gdtype: str = leaf.dtype
        # wide: an f16 input fed as f32 holding f16 values (GraphPlan's ``wide``)
        self.dtype = np.dtype(np.float32 if wide else NUMPY_DTYPE[leaf.dtype])
        self.shape: tuple[int, ...] = tuple(leaf.shape)
        self.param_shape: tuple[int, ...] = tuple(reversed(leaf.ne))
        # (caller's array, its Parameter view): one attribute, so threads swap it atomically; at
        # first an object no caller feeds
        self.last: tuple[Any, Any] = (object(), None)
        # Other numpy shapes of the same ggml tensor (e.g. (1, 512) for ne [512, 1, 1, 1]),
        # learnt when the feed checks (ovkit.ops.feed) accepted them.
        self.alt_shapes: set[tuple[int, ...]] = set()

    def convert(self, value: Any) -> np.ndarray:
        """The Parameter view of ``value`` (same memory); LookupError when it needs the checks
        and conversion of ``ovkit.ops.feed``."""
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
            raise LookupError(self.name)
        view = value.reshape(self.param_shape)
        self.last = (value, view)
        return view


class GraphPlan:
    """What one ``Graph.compute`` signature needs on every call after the first."""

    def __init__(
        self,
        graph: GraphIR,
        outputs: Sequence[Tensor],
        device: str,
        run: RunConfig,
        *,
        extra_outputs: Sequence[Tensor] = (),
        names: Sequence[str] | None = None,
        wide: Iterable[str] = (),
        manual_gqa: bool | None = None,
    ) -> None:
        self.graph = graph
        # GGML_OPENVINO_MANUAL_GQA_ATTN as resolved for the device: FLASH_ATTN_EXT's form
        # (ovkit.ops.translate.attention_form); part of the structure key, as of upstream's cache key
        self.manual_gqa = manual_gqa
        self.outputs = tuple(outputs)  # strong refs: ids in the plan key stay valid
        self.extra_outputs = tuple(extra_outputs)
        self.every = [*self.outputs, *self.extra_outputs]  # what the model computes
        self.device = device
        self.run = run
        self.leaves = graph.inputs_of(self.every)  # the Parameters, in order
        # f16 inputs whose Parameter is f32 (the caller feeds f32 arrays of f16 values): the
        # plugin then needs no f16 -> f32 conversion of them on every run (a KV cache read in place)
        asked = frozenset(wide)
        self.wide = frozenset(t.name for t in self.leaves if t.name in asked and t.dtype == "f16")
        self.slots = [InputSlot(t, wide=t.name in self.wide) for t in self.leaves]
        self.input_names = [t.name for t in self.leaves]
        self.known = input_names(graph)
        self.output_names = list(names) if names else [f"output{i}" for i in range(len(self.outputs))]
        self.cache_key: CacheKey | None = None  # of the compiled graph it ran on last
        self.structure = graph_structure_key(graph, self.every)
        if self.wide:
            self.structure += "+wide:" + ",".join(sorted(self.wide))
        if manual_gqa is not None:
            self.structure += f"+manual_gqa:{int(manual_gqa)}"
        self._out_specs = [
            (tuple(o.shape), None if o.dtype == "bf16" else np.dtype(NUMPY_DTYPE.get(o.dtype, np.float32)))
            for o in self.outputs
        ]

    def require_supported(self) -> None:
        """Raise :class:`UnsupportedOpError` for the first op the device's policy rejects."""
        for t, decision in graph_decisions(self.graph, self.every, str(device_class(self.device))):
            if not decision.supported:
                raise UnsupportedOpError(t, decision.reason, self.device)

    def factory(self) -> Any:
        """Build the OpenVINO model (called on a compile miss only); outputs get stable names."""
        from ovkit.ops.translate import build_model

        model = build_model(self.graph, self.every, self.leaves, manual_gqa=self.manual_gqa)
        if self.wide:
            _widen_parameters(model, self.wide)
        for port, name in zip(model.outputs, self.output_names, strict=True):
            port.get_tensor().set_names({name})
        if self.extra_outputs:  # state outputs take their input's (4-D Parameter) shape
            import openvino.opset16 as ops

            params = {p.get_friendly_name(): p for p in model.get_parameters()}
            n = len(self.outputs)
            for port, name in zip(model.outputs[n:], self.output_names[n:], strict=True):
                target = params[name.split(":", 1)[1]].get_partial_shape()
                result = port.get_node()
                shaped = ops.reshape(result.input_value(0), np.array(dims(target), np.int64), False)
                result.input(0).replace_source_output(shaped.output(0))
                result.output(0).get_tensor().set_names({name})
            model.validate_nodes_and_infer_types()
        return model

    def feed(self, inputs: Mapping[str, Any], skip: Collection[str] = ()) -> list[np.ndarray]:
        """The Parameter values in order (``skip``: state inputs the session feeds itself); arrays that
        are not the Parameter's values already go through ``ovkit.ops.feed``."""
        try:
            out = [s.convert(inputs[s.name]) for s in self.slots if s.name not in skip]
        except LookupError:
            zeros = {s.name: np.zeros(s.shape, s.dtype) for s in self.slots if s.name in skip}
            prepared = prepare_feed(self.graph, self.every, {**zeros, **inputs})
            for s in self.slots:  # accepted: remember the spelling of each shape for the fast path
                if s.name in inputs and len(s.alt_shapes) < 8:
                    s.alt_shapes.add(tuple(np.shape(inputs[s.name])))
            return [prepared[s.name] for s in self.slots if s.name not in skip]
        if len(inputs) > len(out):
            check_input_names(self.known, inputs)
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


def _widen_parameters(model: Any, names: frozenset[str]) -> None:
    """Make the f16 Parameters ``names`` f32 Parameters converted to f16: fed f16 values, the
    conversion is exact and the CPU plugin (computing in f32) folds it away."""
    import openvino as ov
    import openvino.opset16 as ops

    for i, param in enumerate(list(model.get_parameters())):
        name = param.get_friendly_name()
        if name not in names:
            continue
        wide = ops.parameter(param.get_partial_shape(), ov.Type.f32, name=name)
        wide.output(0).get_tensor().set_names(param.output(0).get_tensor().get_names())
        narrow = ops.convert(wide, ov.Type.f16)
        for target in list(param.output(0).get_target_inputs()):
            target.replace_source_output(narrow.output(0))
        model.replace_parameter(i, wide)
    model.validate_nodes_and_infer_types()


def config_key(config: Mapping[str, Any] | RunConfig | None) -> Hashable:
    """A plan key's part for the caller's ``config`` (a dict of properties becomes sorted pairs)."""
    if config is None or isinstance(config, RunConfig):
        return config
    return tuple(sorted((str(k), str(v)) for k, v in config.items()))


def plan_run_config(
    config: Mapping[str, Any] | RunConfig | None, graph: GraphIR, outs: Sequence[Tensor], device: str
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


PLAN_TAG = "ovkit.engine.plan"  # the tag of the engine's entries in ``graph.derived``
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
