"""Compiled graphs and their infer requests: binding (zero-copy where possible), state,
profiling."""

from __future__ import annotations

import operator
import threading
from collections.abc import Mapping, Sequence
from time import perf_counter
from typing import TYPE_CHECKING, Any

import numpy as np

from ovkit.dtypes import bf16_bits_to_f32, f32_to_bf16_bits
from ovkit.runtime import Core, is_simulated

if TYPE_CHECKING:
    import pandas as pd

    from ovkit.engine.keys import CacheKey
from ovkit.engine.errors import EngineError, InputError, ProfilingOffError
from ovkit.engine.ov_model import PortSpec, port_specs
from ovkit.engine.run_config import EffectiveConfig, RunConfig


# -- Compiled graphs and their requests --------------------------------------------------------
class CompiledGraph:
    """One compiled model: its ports, effective configuration, compile time and shared request."""

    def __init__(
        self,
        key: CacheKey,
        compiled: Any,
        *,
        core: Core,
        run_config: RunConfig,
        states: Mapping[str, str],
        stateful: bool,
        variables: Mapping[str, str],
        state_specs: Mapping[str, PortSpec],
        compile_seconds: float,
        blob: Any = None,
    ) -> None:
        self.key = key
        self.device = key.device
        self.compiled = compiled
        self.core = core  # kept alive: the compiled model belongs to it
        self.blob = blob  # the mapped blob an imported model may read its weights from
        self.run_config = run_config
        self.states = dict(states)  # state input name -> output name
        self.stateful = stateful
        self.variables = dict(variables)  # state input name -> OpenVINO variable id (stateful)
        self.state_specs = dict(state_specs)
        self.compile_seconds = compile_seconds
        self.effective = EffectiveConfig.read(compiled, run_config, simulated=is_simulated(core))
        self.inputs = port_specs(compiled.inputs, "input")
        self.outputs = port_specs(compiled.outputs, "output")
        self.runs = 0
        self.lock = threading.Lock()
        self._runner: Runner | None = None

    def __repr__(self) -> str:
        return (
            f"CompiledGraph(device={self.device!r}, inputs={[p.name for p in self.inputs]}, "
            f"outputs={[p.name for p in self.outputs]}, stateful={self.stateful})"
        )

    @property
    def runner(self) -> Runner:
        """The shared request (stateless callers); sessions make a ``Runner`` of their own."""
        if self._runner is None:
            self._runner = Runner(self)
        return self._runner


def _bf16_tensor(array: np.ndarray) -> Any:
    """An ``openvino.Tensor`` of type bf16 holding ``array`` rounded as ggml rounds (NaN kept NaN)."""
    import openvino as ov

    tensor = ov.Tensor(ov.Type.bf16, ov.Shape(list(array.shape)))
    tensor.data.view(np.uint16)[...] = f32_to_bf16_bits(array)
    return tensor


def _tensor_to_numpy(tensor: Any, ov_type: str) -> np.ndarray:
    """A copy of an output tensor; bf16 widens to float32."""
    if ov_type == "bf16":
        return bf16_bits_to_f32(np.asarray(tensor.data).view(np.uint16)).reshape(tuple(tensor.shape))
    return np.array(tensor.data, copy=True)


# The inputs argument of OpenVINO's infer(): every input is bound beforehand (never mutated).
_NO_INPUTS: dict[Any, Any] = {}


class Runner:
    """One infer request with its bound inputs kept alive, and (optionally) state."""

    def __init__(self, graph: CompiledGraph) -> None:
        self.graph = graph
        self.request = graph.compiled.create_infer_request()
        n = len(graph.inputs)
        self._by_name = {p.name: p for p in graph.inputs}
        self._bound: list[Any] = [None] * n  # the caller's object last bound at each input
        self._keep: list[Any] = [None] * n  # (array, ov.Tensor) the request reads: keep alive
        self._state_keep: dict[str, Any] = {}
        out_names = set(graph.states.values())
        self._returned = [p for p in graph.outputs if p.name not in out_names]
        self._state_out = {p.name: p for p in graph.outputs if p.name in out_names}
        self._host_state: dict[str, np.ndarray] = {}
        self._state_in = {out: inp for inp, out in graph.states.items()}
        # Inputs the caller feeds (state inputs are fed by the runner when not stateful).
        self._free = [p for p in graph.inputs if graph.stateful or p.name not in graph.states]
        self._direct = not any(p.ov_type == "bf16" for p in graph.outputs)
        from openvino._pyopenvino import InferRequest as _BaseRequest

        self._infer = _BaseRequest.infer
        if graph.states and not graph.stateful:
            self.reset_state()
        self.runs = 0
        self.last_infer_seconds = 0.0

    # -- binding --------------------------------------------------------------------------
    def _bind(self, port: PortSpec, value: Any) -> None:
        import openvino as ov

        i = port.index
        if value is self._bound[i]:
            return  # the same array object: the request already reads its memory
        array = np.asarray(value)
        if not port.accepts(array.shape):
            want = "[" + ", ".join("?" if d < 0 else str(d) for d in port.shape) + "]"
            raise InputError(
                f"input {port.name!r}: shape {list(array.shape)} does not fit the compiled shape {want}"
            )
        if port.ov_type == "bf16":
            tensor = _bf16_tensor(array)
            self.request.set_input_tensor(i, tensor)
            self._keep[i] = (tensor,)
            self._bound[i] = None  # a converted copy: rebind every call
            return
        want_dtype = port.dtype
        if array.dtype != want_dtype and not np.can_cast(array.dtype, want_dtype, "same_kind"):
            raise InputError(
                f"input {port.name!r}: dtype {array.dtype} cannot be converted to {want_dtype} "
                f"({port.ov_type}) without losing its kind"
            )
        bound = np.ascontiguousarray(array, dtype=want_dtype)
        if not bound.flags.writeable:  # OpenVINO shares only writable memory: read-only arrays
            bound = bound.copy()  # (np.load mmap_mode="r", np.frombuffer(bytes)) are copied
        tensor = ov.Tensor(bound, shared_memory=True)
        self.request.set_input_tensor(i, tensor)
        # Keep both alive for as long as the request may read them (the request holds no reference).
        self._keep[i] = (bound, tensor)
        # Zero-copy only when no conversion happened; otherwise the next call must copy again.
        self._bound[i] = value if bound is value else None

    def bind(self, inputs: Mapping[str, Any] | Sequence[Any]) -> None:
        """Bind inputs by name (a mapping) or in input order (a sequence)."""
        ports = self.graph.inputs
        if type(inputs) is not list and isinstance(inputs, Mapping):
            missing = [p.name for p in ports if p.name not in inputs and p.name not in self._host_state]
            if missing:
                raise InputError(f"missing input(s) {missing}; the graph expects {[p.name for p in ports]}")
            unknown = [k for k in inputs if k not in self._by_name]
            if unknown:
                raise InputError(f"unknown input(s) {unknown}; the graph expects {[p.name for p in ports]}")
            for port in ports:
                value = inputs.get(port.name)
                if value is None:
                    value = self._host_state[port.name]
                self._bind(port, value)
        else:
            free = self._free
            if len(inputs) != len(free):
                raise InputError(f"expected {len(free)} inputs ({[p.name for p in free]}), got {len(inputs)}")
            bound = self._bound
            if len(free) != len(bound) or not all(map(operator.is_, inputs, bound)):
                for port, value in zip(free, inputs, strict=True):
                    if value is not bound[port.index]:  # the same object is bound already (zero-copy)
                        self._bind(port, value)
            for name, value in self._host_state.items():
                self._bind(self._by_name[name], value)

    # -- running --------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
        """Bind, infer, and return copies of the outputs."""
        with self.graph.lock:
            self.bind(inputs)
            t0 = perf_counter()
            try:
                # OpenVINO's own infer(): with share_outputs=False it returns fresh copies of
                # every output (one copy, made in C++), in output order.
                result = self._infer(self.request, _NO_INPUTS, not self._direct, True)
            except RuntimeError as exc:
                raise EngineError(f"inference failed on {self.graph.device}: {exc}") from exc
            self.last_infer_seconds = perf_counter() - t0
            self.runs += 1
            self.graph.runs += 1
            if not self._direct:  # bf16 outputs to widen
                if self._state_out:
                    self._capture_host_state()
                req = self.request
                return [_tensor_to_numpy(req.get_output_tensor(p.index), p.ov_type) for p in self._returned]
            values = list(result.values())
            if not self._state_out:  # the common case: every output is returned
                return values
            for name, port in self._state_out.items():
                self._host_state[self._state_in[name]] = values[port.index]
            return [values[p.index] for p in self._returned]

    __call__ = run

    # -- state ----------------------------------------------------------------------------
    def _check_state(self, name: str) -> None:
        if name not in self.graph.states:
            raise KeyError(
                f"no state named {name!r}; this graph has {list(self.graph.states) or 'no states'}"
            )

    def _variable(self, name: str) -> Any:
        var_id = self.graph.variables[name]
        for st in self.request.query_state():
            if st.name == var_id:
                return st
        raise EngineError(f"state variable {var_id!r} not found in the infer request")

    def _capture_host_state(self) -> None:
        for out_name, port in self._state_out.items():
            value = _tensor_to_numpy(self.request.get_output_tensor(port.index), port.ov_type)
            self._host_state[self._state_in[out_name]] = value

    def state(self, name: str) -> np.ndarray:
        """A copy of the current value of state ``name`` (e.g. a KV cache)."""
        self._check_state(name)
        if not self.graph.stateful:
            return self._host_state[name].copy()
        st = self._variable(name)
        return _tensor_to_numpy(st.state, self.graph.state_specs[name].ov_type)

    def set_state(self, name: str, value: Any) -> None:
        """Replace state ``name`` (its shape must fit the declared one)."""
        import openvino as ov

        self._check_state(name)
        spec = self.graph.state_specs[name]
        array = np.asarray(value)
        if not spec.accepts(array.shape):
            raise InputError(f"state {name!r}: shape {list(array.shape)} does not fit {list(spec.shape)}")
        array = np.ascontiguousarray(array, dtype=spec.dtype)
        with self.graph.lock:
            if not self.graph.stateful:
                self._host_state[name] = array.copy()
                return
            tensor = _bf16_tensor(array) if spec.ov_type == "bf16" else ov.Tensor(array, shared_memory=True)
            self._variable(name).state = tensor
            self._state_keep[name] = (array, tensor)

    def reset_state(self, name: str | None = None) -> None:
        """Back to the initial value (zeros; dynamic dimensions of length 0), one or all states."""
        names = list(self.graph.states) if name is None else [name]
        for n in names:
            self._check_state(n)
        if not self.graph.stateful:
            for n in names:
                spec = self.graph.state_specs[n]
                self._host_state[n] = np.zeros(tuple(max(d, 0) for d in spec.shape), spec.dtype)
            return
        with self.graph.lock:
            if name is None:
                self.request.reset_state()
            else:
                self._variable(name).reset()
            for n in names:
                self._state_keep.pop(n, None)

    # -- profiling ------------------------------------------------------------------------
    def profile(self) -> pd.DataFrame:
        """Per-node timings of the last run (``ProfilingOffError`` when profiling was not on)."""
        import pandas as pd

        if not self.graph.effective.profiling:  # what the compiled model reports, not what was asked
            raise ProfilingOffError(
                "profiling was not on for this compiled model (PERF_COUNT reports off): "
                "run with RunConfig(profiling=True) to get per-node timings"
            )
        if self.runs == 0:
            raise ProfilingOffError("no run yet: per-node timings exist after the first run")
        rows = [
            {
                "node": p.node_name,
                "type": p.node_type,
                "exec_type": p.exec_type,
                "status": str(p.status).rsplit(".", 1)[-1],
                "real_time_us": p.real_time.total_seconds() * 1e6,
                "cpu_time_us": p.cpu_time.total_seconds() * 1e6,
            }
            for p in self.request.profiling_info
        ]
        return pd.DataFrame(
            rows, columns=["node", "type", "exec_type", "status", "real_time_us", "cpu_time_us"]
        )
