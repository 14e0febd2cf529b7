"""Run a GGUF model: prefill N tokens, then greedy-decode M tokens, the KV cache on the device.

On the CPU one model compiled from the file's blocks (``shapes="lean"``, ``ovkit.model.lean``);
elsewhere, or with ``shapes="buckets"``, the graph of ``ovkit.model.program`` compiled per shape
bucket (``n_tokens``, ``n_kv``) as llama.cpp's static graphs are, the KV cache in host arrays
bound to every bucket's cache inputs, each graph returning only the rows it writes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from ovkit import quant
from ovkit.config import read_config
from ovkit.devices import DeviceClass, device_class
from ovkit.engine import RunConfig, get_engine, graph_session, run_config_from
from ovkit.gguf import GGUFModel, read_gguf
from ovkit.ir import UnsupportedOpError
from ovkit.memory import format_bytes
from ovkit.model import lean
from ovkit.model.arch import ModelError
from ovkit.model.footprint import check_fits, kv_bytes
from ovkit.model.limits import check_count, check_n_ctx, model_hparams, token_ids
from ovkit.model.precision import PRECISIONS
from ovkit.model.program import (
    DecoderOut,
    GraphShape,
    cache_names,
    causal_inputs,
    decoder_program,
    input_specs,
    n_kv_for,
)
from ovkit.ops.ggml_numerics import mark as mark_ggml_numerics
from ovkit.ops.ggml_numerics import with_ggml_numerics
from ovkit.report import Report, Reported, format_duration, format_rate
from ovkit.runtime import Core, is_simulated

logger = logging.getLogger(__name__)

DEFAULT_N_UBATCH = 512  # llama.cpp's default micro-batch
SHOWN_TOKENS = 24  # generated ids a Generation's repr lists before eliding the rest

#: ``shapes=``: one dynamic model from the GGUF's blocks ("lean"), or one static model of
#: ovkit's ggml graph per shape bucket ("buckets", wherever "lean" does not apply).
SHAPE_MODES = ("lean", "buckets")
#: Prefill chunk lengths the static buckets are compiled for: a chunk runs padded to the smallest
#: size that holds it, so prompts of many lengths share a few compiled models.
PREFILL_SIZES = (8, 16, 32, 64, 128, 192, 256, 384, 512)
#: Compiled models a Model keeps (``max_buckets``): the least recently used beyond it is released.
MAX_BUCKETS = 4


@dataclass(frozen=True, slots=True, repr=False)
class Generation(Reported):
    """One prefill + greedy decode: the ids, logits per position and the speeds (shown as a
    table of times and tok/s; the fields keep the raw seconds)."""

    prompt: tuple[int, ...]
    tokens: tuple[int, ...]  # generated ids; tokens[0] is the prefill's greedy pick
    prompt_logits: np.ndarray = field(repr=False)  # (n_prompt, n_vocab); (1, n_vocab): the last only
    decode_logits: np.ndarray = field(repr=False)  # (n_decode, n_vocab): after feeding tokens[i]
    prefill_s: float
    decode_s: float
    compile_s: float = 0.0  # building and compiling the shape buckets, before the timed runs
    stopped: bool = False  # ended at a ``stop`` id (the last of tokens) before n_predict ran out

    @property
    def prefill_tok_s(self) -> float:
        return len(self.prompt) / self.prefill_s if self.prefill_s > 0 else float("inf")

    @property
    def decode_tok_s(self) -> float:
        n = len(self.decode_logits)
        return n / self.decode_s if self.decode_s > 0 else float("inf")

    def report(self) -> Report:
        shown = " ".join(map(str, self.tokens[:SHOWN_TOKENS]))
        more = f" … (+{len(self.tokens) - SHOWN_TOKENS})" if len(self.tokens) > SHOWN_TOKENS else ""
        rows = (
            ("prefill", f"{len(self.prompt):,}", format_duration(self.prefill_s), format_rate(self.prefill_tok_s)),
            ("decode", f"{len(self.decode_logits):,}", format_duration(self.decode_s), format_rate(self.decode_tok_s)),
            ("compile", "", format_duration(self.compile_s), "not counted in the speeds"),
        )  # fmt: skip
        return Report(
            f"generation: {len(self.prompt)} prompt tokens, {len(self.tokens)} generated",
            ("phase", "tokens", "time", "speed"),
            rows,
            (f"generated ids: {shown}{more}",),
        )


@dataclass(frozen=True, slots=True)
class KvWrite:
    """One SET_ROWS of the host KV cache: the graph output holding the written rows goes into
    ``cache`` viewed as rows of ``row_len`` elements, at the indices fed as ``index_input``."""

    cache: str
    row_len: int
    index_input: str


def _release_host_memory() -> None:
    """Give the decoded weights and translated models (reference cycles until collected, heap
    pages glibc keeps until trimmed) back to the system after a compile."""
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # glibc only
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _discard_compiled(engine: Any, buckets: dict[GraphShape, _Bucket]) -> None:
    """Drop the compiled graphs of ``buckets`` from ``engine``'s cache, and the buckets."""
    engine.discard(b.session.runner.graph for b in buckets.values() if b.session is not None)
    buckets.clear()


@dataclass
class _Bucket:
    shape: GraphShape
    graph: Any
    out: DecoderOut
    session: Any = None
    writes: tuple[KvWrite, ...] = ()
    caches: dict[str, np.ndarray] = field(default_factory=dict)  # its views of the host cache


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _serialized(method: Callable[Concatenate[Model, _P], _R]) -> Callable[Concatenate[Model, _P], _R]:
    """``method`` under the model's lock: calls from several threads run one at a time, each whole
    (the KV cache, ``n_past`` and the buckets are one state)."""

    @functools.wraps(method)
    def locked(self: Model, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return method(self, *args, **kwargs)

    return locked


class Model(Reported):
    """A GGUF decoder model compiled for one device (see the module docstring), shown as a table
    of its shape, sizes and device; its running methods are serialized."""

    def __init__(
        self,
        path: str | os.PathLike[str] | GGUFModel,
        *,
        device: str | None = None,
        core: Core | None = None,
        n_ctx: int = 512,
        flash_attn: bool = True,
        n_ubatch: int = DEFAULT_N_UBATCH,
        profiling: bool = False,
        no_requant: bool = False,
        precision: str = "exact",
        n_threads: int | None = None,
        shapes: str | None = None,
        max_buckets: int = MAX_BUCKETS,
    ) -> None:
        self.gguf = path if isinstance(path, GGUFModel) else read_gguf(path)
        self.hp = model_hparams(self.gguf)
        n_ctx = check_n_ctx(self.hp, n_ctx, core=core)  # the model's context and this machine's memory
        if precision not in PRECISIONS:
            raise ModelError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        if max_buckets < 1:
            raise ModelError(f"max_buckets={max_buckets} must be >= 1")
        self.max_buckets = max_buckets
        if shapes is not None and shapes not in SHAPE_MODES:
            raise ModelError(f"shapes {shapes!r} is not one of {', '.join(SHAPE_MODES)}")
        self.n_ctx = n_ctx
        self.precision = precision
        self.flash_attn = flash_attn
        self.core = core
        engine = get_engine(core)
        self.device = device or engine.selected_device()
        self.device_class = str(device_class(self.device))
        config = read_config()
        self.kv_slice_disabled = config.disable_kv_slice
        self.n_ubatch = (
            config.prefill_chunk_size if self.device_class == DeviceClass.NPU else max(1, n_ubatch)
        )
        self.profiling = profiling
        self.n_threads = n_threads
        lean_ok = (
            self.device_class == DeviceClass.CPU
            and precision != "ggml"
            and not profiling
            and not self.hp.spec.moe
        )
        if shapes == "lean" and not lean_ok:
            raise ModelError(
                f"shapes='lean' needs the CPU class, precision 'exact' or 'device', no per-op "
                f"profiling and no MoE layers (got {self.device}, precision={precision!r}, "
                f"profiling={profiling}, {self.hp.arch})"
            )
        if shapes in (None, "lean") and lean_ok:
            self.shapes = "lean"
            check_fits(self.gguf, self.hp, n_ctx)
        else:
            self.shapes = "buckets"
        self._lean: Any = None  # the compiled lean session (ovkit.model.lean), built on first use
        self.spill_dir = config.spill_dir
        self.compiled_model_cache_dir = config.compiled_model_cache_dir  # the lean model's entries
        # one cache shared by every bucket, f16 values held as f32 on the CPU class (read by its
        # f32 graphs without a conversion per step: SET_ROWS 0.8 % of a decode step against 4.6 %);
        # "lean" keeps it in OpenVINO state instead
        self._kv_wide = self.device_class == DeviceClass.CPU
        kv_dtype = np.float32 if self._kv_wide else np.float16
        self._kv: dict[str, np.ndarray] = (
            {n: np.zeros((n_ctx, self.hp.n_embd_kv), kv_dtype) for n in cache_names(self.hp.n_layer)}
            if self.shapes != "lean"
            else {}
        )
        self.no_requant = no_requant
        self._buckets: dict[GraphShape, _Bucket] = {}
        # the engine's cache would keep this model's compiled graphs after the model is gone
        weakref.finalize(self, _discard_compiled, engine, self._buckets)
        self.n_past = 0
        self._lock = threading.RLock()  # see _serialized

    @functools.cached_property
    def _configs(self) -> dict[int, RunConfig]:
        """The buckets' compile configurations (decode: 1, prefill: 2), the weights' compile hints
        applied at the device's own precision."""
        device = self.precision == "device"
        quantized = (
            [w for w in self.weights.values() if isinstance(w, quant.QuantizedWeight)] if device else []
        )
        base = RunConfig(
            inference_precision=PRECISIONS[self.precision],
            profiling=self.profiling,
            num_threads=self.n_threads,
        )
        return {n: run_config_from(quant.compile_hints(quantized, n) if device else {}, base) for n in (1, 2)}

    def _lean_session(self) -> Any:
        """The lean model's session, compiled on first use."""
        if self._lean is None:
            core = get_engine(self.core).core
            self._lean = lean.compile_lean(
                self.gguf,
                self.hp,
                self.device,
                exact=self.precision == "exact",
                no_requant=self.no_requant,
                n_threads=self.n_threads,
                spill_dir=self.spill_dir,
                # a simulated core's compiled models cannot be exported, as in the engine
                cache_dir=None if is_simulated(core) else self.compiled_model_cache_dir,
                core=core,
            )
        return self._lean

    @functools.cached_property
    def weights(self) -> dict[str, Any]:
        """Every tensor as a graph constant, the device's policy applied, read when a graph is
        first built."""
        weights = {}
        for name in self.gguf.tensors:
            w = self.gguf.constant(name)
            if isinstance(w, quant.QuantizedWeight):
                w = w.apply_policy(self.device_class, no_requant=self.no_requant)
            if self.precision == "ggml" and isinstance(w, quant.QuantizedWeight):
                w = with_ggml_numerics(w, self.gguf.tensors[name].type)  # the GGUF's type picks the dot
            weights[name] = w
        return weights

    # -- graphs ---------------------------------------------------------------------------------
    def shape(self, n_tokens: int, start: int, n_outputs: int | None = None) -> GraphShape:
        """The bucket for ``n_tokens`` tokens at positions ``start..`` (llama.cpp's n_kv rule)."""
        end = start + n_tokens
        if end > self.n_ctx:
            raise ModelError(f"positions up to {end - 1} do not fit n_ctx={self.n_ctx}")
        return GraphShape(
            n_tokens, n_kv_for(self.n_ctx, end), self.n_ctx, n_outputs or n_tokens, self.flash_attn
        )

    def cache_rows(self, shape: GraphShape) -> int:
        """A bucket's cache input rows: the ``n_kv`` it reads (the backend's KV slice) with the host
        cache and flash attention, unless GGML_OPENVINO_DISABLE_KV_SLICE; else ``n_ctx``."""
        sliced = shape.flash_attn and not self.kv_slice_disabled
        return shape.n_kv if sliced else shape.n_ctx

    def build(self, shape: GraphShape) -> tuple[Any, DecoderOut]:
        """A fresh ovkit ``Graph`` of the model for ``shape`` and its outputs."""
        from ovkit.graph import Graph

        g = Graph()
        leaves: dict[str, Any] = {n: g.constant(w, n) for n, w in self.weights.items()}
        for name, (shp, dtype) in input_specs(self.hp, shape, cache_rows=self.cache_rows(shape)).items():
            leaves[name] = g.input(name, shp, dtype)
        out = decoder_program(self.hp, shape)(g, leaves)
        if self.precision == "ggml":  # llama.cpp CPU's attention numerics too
            mark_ggml_numerics(g)
        return g, out

    def _bucket(self, shape: GraphShape) -> _Bucket:
        known = self._buckets.pop(shape, None)
        if known is not None:
            self._buckets[shape] = known  # the most recently used last (``_evict``)
        if known is None or known.session is None:  # room before compiling
            self._evict(limit=self.max_buckets - 1)
        b = self._buckets.get(shape)
        if b is None:
            g, out = self.build(shape)
            b = _Bucket(shape, g, out)
            self._buckets[shape] = b
        if b.session is None:
            outputs = [b.out.logits]
            for name in cache_names(self.hp.n_layer):  # the written rows only, stored by eval
                nxt = b.out.caches[name]
                rows, index = nxt.srcs[1], nxt.srcs[2]
                outputs.append(rows)
                b.writes += (KvWrite(name, nxt.ne[0], index.name),)
                b.caches[name] = self._kv[name][: self.cache_rows(shape)]  # no copy
            try:
                b.session = graph_session(
                    b.graph,
                    outputs,
                    {},
                    self.device,
                    core=self.core,
                    config=self.run_config(shape.n_tokens),
                    wide=list(b.caches) if self._kv_wide else (),
                )
            except UnsupportedOpError as exc:
                raise ModelError(
                    f"{exc}. ovkit runs the whole graph on {self.device} and cannot hand a node back "
                    "to ggml's CPU backend as llama.cpp's scheduler does (ovkit.model.placement.fallbacks "
                    "lists every node that would fall back)"
                ) from exc
        return b

    def run_length(self, n_tokens: int, start: int) -> int:
        """The tokens a chunk at ``start`` runs as: with static buckets, padded (after the chunk, out
        of the real tokens' causal view) to the next of ``PREFILL_SIZES`` that fits."""
        if n_tokens == 1 or self.shapes != "buckets" or self.device_class == DeviceClass.NPU:
            return n_tokens
        size = next((s for s in PREFILL_SIZES if s >= n_tokens), n_tokens)
        return size if size <= self.n_ubatch and start + size <= self.n_ctx else n_tokens

    @_serialized
    def prepare(self, n_prompt: int, n_predict: int, *, last_only: bool = False) -> None:
        """Build and compile every bucket a run will use, so timed runs do not compile (the first
        ``max_buckets`` of them: more would release those again)."""
        if self.shapes == "lean":
            if n_prompt + n_predict > self.n_ctx:
                raise ModelError(f"{n_prompt} prompt + {n_predict} new tokens exceed n_ctx={self.n_ctx}")
            self._lean_session()
            return
        outputs = 1 if last_only else None  # the prefill's logits: the last position's, or every one
        shapes = [
            self.shape(self.run_length(min(self.n_ubatch, n_prompt - i), i), i, outputs)
            for i in range(0, n_prompt, self.n_ubatch)
        ]
        shapes = list(dict.fromkeys(shapes + [self.shape(1, n_prompt + i) for i in range(n_predict)]))
        if len(shapes) > self.max_buckets:
            logger.warning(
                "%s: a run of %d prompt tokens and %d steps needs %d compiled models, max_buckets=%d: "
                "%d of them compile during the run (a larger max_buckets keeps them all)",
                self.gguf.path,
                n_prompt,
                n_predict,
                len(shapes),
                self.max_buckets,
                len(shapes) - self.max_buckets,
            )
        for shape in shapes[: self.max_buckets]:
            self._bucket(shape)

    def _evict(self, limit: int) -> None:
        """Release the least recently used compiled models until at most ``limit`` are left."""
        live = [k for k, b in self._buckets.items() if b.session is not None]
        excess = len(live) - limit
        if excess <= 0:
            return
        dropped = {k: self._buckets.pop(k) for k in live[:excess]}  # oldest use first
        _discard_compiled(get_engine(self.core), dropped)
        _release_host_memory()

    # -- running --------------------------------------------------------------------------------
    @_serialized
    def close(self) -> None:
        """Release the compiled models now (as when collected); it still runs afterwards, from
        position 0."""
        _discard_compiled(get_engine(self.core), self._buckets)
        self._lean = None
        self.reset()

    @_serialized
    def reset(self) -> None:
        """Forget the KV cache (the next eval starts at position 0)."""
        self.n_past = 0
        for cache in self._kv.values():
            cache.fill(0)
        if self._lean is not None:
            self._lean.reset()

    def effective_precision(self) -> str:
        """The inference precision the compiled sessions run (asked for or the device's default)."""
        if self.shapes == "lean":
            used = [self._lean.inference_precision] if self._lean is not None else []
        else:
            used = sorted({str(s.effective.inference_precision) for s in self.sessions()})
        used_s = ", ".join(used) or str(PRECISIONS[self.precision] or "device default")
        return (
            f"{used_s}, ggml CPU numerics (q8 matmuls, f16 attention)" if self.precision == "ggml" else used_s
        )

    @_serialized
    def eval(self, tokens: Sequence[int], *, last_only: bool = False) -> np.ndarray:
        """Feed ``tokens`` after what the cache holds; logits of every fed position (n, n_vocab),
        or of the last one only (1, n_vocab) with ``last_only`` (what sampling needs)."""
        toks = token_ids(tokens, self.hp.n_vocab)
        if toks.size == 0:
            raise ModelError("eval: no tokens given")
        if self.n_past + toks.size > self.n_ctx:
            raise ModelError(f"{self.n_past} cached + {toks.size} new tokens exceed n_ctx={self.n_ctx}")
        lean = self._lean_session() if self.shapes == "lean" else None
        if lean is not None and lean.n_past != self.n_past:  # a reset elsewhere (close, a new generate)
            lean.reset()
            if self.n_past:
                raise ModelError("the lean model's cache was released: reset() and feed the tokens again")
        outs = []
        for i in range(0, toks.size, self.n_ubatch):
            chunk = toks[i : i + self.n_ubatch]
            if lean is not None:
                logits = lean.run(chunk, np.array([chunk.size - 1]) if last_only else np.arange(chunk.size))
            else:
                logits = self._run_bucket(chunk, last_only)
            outs.append(logits.reshape(-1, self.hp.n_vocab)[: 1 if last_only else chunk.size])
            self.n_past += chunk.size
        return outs[-1] if last_only else np.concatenate(outs, axis=0)

    def _run_bucket(self, chunk: np.ndarray, last_only: bool) -> np.ndarray:
        """One chunk on its shape bucket: its logits; the rows it writes stored in the host cache."""
        n = chunk.size
        size = self.run_length(n, self.n_past)
        run = np.concatenate([chunk, np.full(size - n, chunk[-1])]) if size > n else chunk
        shape = self.shape(size, self.n_past, 1 if last_only else None)
        b = self._bucket(shape)
        feed = causal_inputs(self.hp, shape, run, self.n_past, out_ids=[n - 1] if last_only else None)
        # the same view objects every call: bound once, read in place (ovkit.engine)
        logits, *rows = b.session.compute({**feed, **b.caches} if b.caches else feed)
        for w, r in zip(b.writes, rows, strict=True):  # SET_ROWS on the host: the new rows only
            index = feed[w.index_input]
            real = index.size * n // size  # the chunk's own rows come first; padding's dropped
            rows_f16 = r.reshape(-1, w.row_len)[:real].astype(np.float16)  # the f16 store, as ggml rounds
            self._kv[w.cache].reshape(-1, w.row_len)[index[:real]] = rows_f16
        return np.asarray(logits)

    @_serialized
    def generate(
        self,
        prompt: Sequence[int],
        n_predict: int,
        *,
        stop: Collection[int] = (),
        all_logits: bool = False,
    ) -> Generation:
        """Prefill ``prompt`` (the last position's logits, every one with ``all_logits``) then
        ``n_predict`` greedy steps; ``stop``: end at the first generated id in it, kept last in
        ``tokens``, as llama.cpp stops at end of generation."""
        # every size and id checked before anything is compiled
        n_predict = check_count("n_predict", n_predict)
        n_prompt = token_ids(prompt, self.hp.n_vocab).size
        if n_prompt == 0:
            raise ModelError("generate: no prompt tokens given")
        if n_prompt + n_predict > self.n_ctx:
            raise ModelError(
                f"a prompt of {n_prompt} tokens and n_predict={n_predict} need {n_prompt + n_predict} "
                f"positions, more than n_ctx={self.n_ctx}"
            )
        self.reset()
        t0 = time.perf_counter()
        self.prepare(len(prompt), n_predict, last_only=not all_logits)
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        prompt_logits = self.eval(prompt, last_only=not all_logits)
        prefill_s = time.perf_counter() - t0
        tokens = [int(np.argmax(prompt_logits[-1]))]
        dec: list[np.ndarray] = []
        t0 = time.perf_counter()
        stops = frozenset(int(t) for t in stop)
        for i in range(n_predict):
            if tokens[i] in stops:
                break
            logits = self.eval([tokens[i]], last_only=True)[0]
            dec.append(logits)
            if i + 1 < n_predict:
                tokens.append(int(np.argmax(logits)))
        decode_s = time.perf_counter() - t0
        decode_logits = np.stack(dec) if dec else np.zeros((0, self.hp.n_vocab), np.float32)
        return Generation(
            tuple(int(t) for t in prompt),
            tuple(tokens[: max(n_predict, 1)]),
            prompt_logits,
            decode_logits,
            prefill_s,
            decode_s,
            compile_s,
            stopped=tokens[-1] in stops,
        )

    def report(self) -> Report:
        hp = self.hp
        kv = kv_bytes(hp, self.n_ctx)
        imported = (
            ", imported from the compiled-model cache" if self._lean and self._lean.loaded_from_cache else ""
        )
        rows = (
            ("architecture", hp.arch),
            ("layers", f"{hp.n_layer:,}"),
            ("n_embd", f"{hp.n_embd:,}"),
            ("heads (q / kv)", f"{hp.n_head} / {hp.n_head_kv}"),
            ("vocabulary", f"{hp.n_vocab:,} tokens"),
            ("GGUF file", format_bytes(self.gguf.path.stat().st_size) if self.gguf.path.exists() else "–"),
            (
                f"weights on {self.device_class}",
                format_bytes(self.gguf.weight_bytes(self.device_class, no_requant=self.no_requant)),
            ),
            ("device", self.device),
            ("context", f"n_ctx {self.n_ctx:,}, KV cache {format_bytes(kv)} (f16), {self.n_past:,} cached"),
            (
                ("compiled model", f"one, lean: dynamic shapes, KV cache in OpenVINO state{imported}")
                if self.shapes == "lean"
                else ("compiled shape buckets", f"{len(self.sessions())}")
            ),
        )
        return Report(f"Model {self.gguf.path.name}", ("", ""), rows)

    def sessions(self) -> list[Any]:
        """The live sessions, one per shape bucket used so far (the lean model: its one session)."""
        if self.shapes == "lean":
            return [self._lean] if self._lean is not None else []
        return [session for _, session in self.shaped_sessions()]

    def shaped_sessions(self) -> list[tuple[GraphShape, Any]]:
        """(shape bucket, live session) of each shape bucket used so far."""
        return [(b.shape, b.session) for b in self._buckets.values() if b.session is not None]

    def run_config(self, n_tokens: int) -> RunConfig:
        """The run configuration of a graph of ``n_tokens`` rows (decode's, or prefill's)."""
        return self._configs[min(n_tokens, 2)]
