"""``predict_action`` replayed from CUDA graphs: the whole device part of a control step launched as one graph.

At batch 1 on a GPU an eager step is bound by the host launching kernels (OpenVLA-7B: ~20 ms per decode step where
reading the weights takes ~4.5 ms, ``benchmarks/results/gpu_h100``), so removing visual tokens changes little there.
A CUDA graph records the kernels of one call and replays them with one launch. The package's device path already
meets the two conditions a capture needs: static shapes (a setting keeps a fixed number of tokens) and no host
sync before the final copy of the actions; nor may it copy from host memory (a Python number assigned into a tensor
does). ``tests/vla/test_cuda_graph.py`` checks the captured part for both on the CPU
(:func:`~prismatic_tr.bench.measure.ops.find_capture_hazards`).

What is captured, per family (:data:`PARTS`), in one graph per (live reductions, input shapes and dtypes):

* native OpenVLA (``openvla``): the prompt, both towers, the reduction (any site), the projector, the prefill and
  the 6 decode steps after it with their KV cache (the prefill's cache is made before the capture,
  :func:`~prismatic_tr.models.generation.ready_cache`; every step's length is fixed, so the cache's growth is static);
  :meth:`~prismatic_tr.models.inference.OpenVLAInferenceMixin.action_tokens`.
* native OpenVLA-OFT (``openvla-oft``): the prompt, the towers for every image, the reduction, the projector and the
  proprio token, the one parallel pass and the head; :meth:`~prismatic_tr.models.oft.NativeOpenVLAOFT.chunk_on_device`.

A replay copies the call's tensors into the graph's input buffers, replays, and runs the host tail of the model's
own ``predict_action`` (``actions_on_host``: the one copy to the host and the un-normalisation), so a captured call
returns what the eager one returns: the same kernels on the same inputs (``tests/gpu/test_cuda_graph.py`` compares
them on a GPU within bfloat16 tolerance).

Rules that keep a replay true:

* The reductions live when a graph was captured are part of its key: attaching, replacing or removing one drops
  every graph of :class:`CapturedPolicy` (the next call captures again). A :class:`CapturedStep` holds the handles
  it was captured with, so the tensors its kernels read stay alive.
* The graphs read the model's parameters where they are: a change in place (``load_state_dict``, merging an
  adapter) is seen by the next replay; parameters replaced by new tensors (``.to(dtype)``, a new module) are not:
  :meth:`CapturedPolicy.reset` after that (the first parameter's address and dtype are checked on every call).
* The graphs of one :class:`CapturedPolicy` share one memory pool: each replay's outputs are copied out before
  the next replay, and calls are not made from several threads at once.
* Greedy decoding only (``do_sample=True`` draws on the host's generator), and the model's own OFT heads.
* No reduction that draws at random (``random``): its key lives on the host and a replay would repeat the draw made
  at capture (:mod:`~prismatic_tr.reducers.random_stream`), so such a setting is refused when a step is captured.

On a CPU, or with a model that is not a native OpenVLA / OpenVLA-OFT, capture is refused before any work with a
``ValueError`` saying why (eager ``vla.predict_action`` is the path there).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from prismatic_tr.models.family import family_of
from prismatic_tr.models.generation import ready_cache
from prismatic_tr.models.wrappers import unwrap_vla
from prismatic_tr.vla.api import live_handles
from prismatic_tr.vla.scope import reduction_call

Inputs = dict[str, torch.Tensor]


@dataclass(frozen=True)
class FamilyParts:
    """How one model family's ``predict_action`` splits: ``device(vla, action_dim, inputs, cache)`` returns the
    tensors a graph captures (no host read); ``host(vla, outputs, unnorm_key)`` returns what ``predict_action``
    returns; ``inputs``: the call's tensor arguments, by name; ``needs_cache``: a KV cache made before capture."""

    device: Callable[..., tuple[torch.Tensor, ...]]
    host: Callable[[nn.Module, tuple[torch.Tensor, ...], str], Any]
    inputs: tuple[str, ...]
    needs_cache: bool


def _openvla_device(vla: nn.Module, action_dim: int, inputs: Inputs, cache: Any) -> tuple[torch.Tensor, ...]:
    extra = {"cache": cache} if cache is not None else {}
    return (vla.action_tokens(inputs["input_ids"], inputs["pixel_values"], inputs.get("attention_mask"), action_dim,
                              **extra),)


def _oft_device(vla: nn.Module, action_dim: int, inputs: Inputs, cache: Any) -> tuple[torch.Tensor, ...]:
    return vla.chunk_on_device(inputs["input_ids"], inputs["pixel_values"], inputs.get("attention_mask"),
                               inputs.get("proprio"))


# One entry per family that a graph can capture (prismatic_tr.models.family names); the others are refused.
PARTS: dict[str, FamilyParts] = {
    "openvla": FamilyParts(_openvla_device, lambda vla, out, key: vla.actions_on_host(out[0], key),
                           ("input_ids", "pixel_values", "attention_mask"), needs_cache=True),
    "openvla-oft": FamilyParts(_oft_device, lambda vla, out, key: vla.actions_on_host(out[0], out[1].clone(), key),
                               ("input_ids", "pixel_values", "attention_mask", "proprio"), needs_cache=False),
}


def model_device(vla: nn.Module) -> torch.device:
    """The device of ``vla``'s first parameter."""
    return next(unwrap_vla(vla).parameters()).device


def check_capturable(vla: nn.Module) -> str:
    """The family name of ``vla`` when its ``predict_action`` can be captured; ``ValueError`` saying why not
    (no CUDA, a model on another device, a family without :data:`PARTS`)."""
    family = family_of(vla).name
    if family not in PARTS:
        raise ValueError(f"CUDA-graph capture needs a native model (family one of {sorted(PARTS)}); this one is "
                         f"{family!r}: load the checkpoint with prismatic_tr.models.load_vla, or call its own "
                         "predict_action (eager)")
    device = model_device(vla)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise ValueError(f"CUDA-graph capture needs the model on a CUDA GPU; it is on {device.type!r}"
                         f"{'' if torch.cuda.is_available() else ' and this machine has no CUDA device'}: call "
                         "vla.predict_action (eager) there")
    return family


def check_replayable(handles: Any) -> None:
    """``ValueError`` when a live reduction draws at random per call (a reducers strategy with ``uses_key`` or
    ``uses_generator``): a captured graph would replay the draw made at capture on every call."""
    from prismatic_tr.reducers import available_methods
    from prismatic_tr.reducers.registry import get_strategy

    for handle in handles:
        method = handle.settings.method
        if method in available_methods() and (get_strategy(method).uses_key or get_strategy(method).uses_generator):
            raise ValueError(f"the attached setting {handle.settings.label!r} draws at random on every call, which a "
                             "CUDA graph cannot: each replay would repeat the draw made at capture; use a "
                             "deterministic method (e.g. diverse) or call vla.predict_action (eager)")


def call_inputs(family: str, input_ids: torch.Tensor | None, pixel_values: torch.Tensor | None,
                attention_mask: torch.Tensor | None = None, proprio: Any = None) -> Inputs:
    """The call's tensors by name, as the graph's buffers hold them (``proprio``: float32 (B, D) from an array or a
    tensor, as OFT's ``predict_action`` reads it). ``ValueError`` for missing images or prompt, or a proprio given
    to a family that takes none."""
    if input_ids is None or pixel_values is None:
        raise ValueError("predict_action needs input_ids and pixel_values")
    inputs = {"input_ids": input_ids, "pixel_values": pixel_values}
    if attention_mask is not None:
        inputs["attention_mask"] = attention_mask
    if proprio is not None:
        if "proprio" not in PARTS[family].inputs:
            raise ValueError(f"proprio was given but a {family!r} model takes none")
        state = torch.as_tensor(np.asarray(proprio) if not torch.is_tensor(proprio) else proprio, dtype=torch.float32)
        inputs["proprio"] = state.reshape(input_ids.shape[0], -1)
    return inputs


def signature(inputs: Inputs) -> tuple:
    """What a graph is specific to: each input's name, shape and dtype."""
    return tuple((name, tuple(t.shape), t.dtype) for name, t in sorted(inputs.items()))


def capture(run: Callable[[Any], tuple[torch.Tensor, ...]], make_cache: Callable[[], Any], device: torch.device,
            warmup: int, pool: Any = None) -> tuple[Any, tuple[torch.Tensor, ...]]:
    """``run(cache)`` captured as a CUDA graph: ``warmup`` eager runs on a side stream (``cache`` None: the model
    makes its own), then one captured run on ``make_cache()``'s cache. Returns the graph and the run's outputs,
    which every replay overwrites in place (PyTorch's recipe, ``torch.cuda.graphs``)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.no_grad(), torch.cuda.stream(side):
        for _ in range(warmup):
            run(None)
    torch.cuda.current_stream(device).wait_stream(side)
    cache = make_cache()
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph, pool=pool):
        outputs = run(cache)
    torch.cuda.synchronize(device)
    return graph, outputs


class CapturedStep:
    """One ``predict_action`` of ``vla`` captured as a CUDA graph for the inputs' shapes and the reductions live now.

    Args:
        vla: a native OpenVLA or OpenVLA-OFT model on a CUDA device (:func:`check_capturable`).
        example: the call's tensors (:func:`call_inputs`); copied into the graph's input buffers.
        unnorm_key: the dataset whose statistics un-normalise the actions (checked before any work).
        warmup: eager runs of the device part on a side stream before the capture (lazy initialisations, cuBLAS
            workspaces), >= 1.
        pool: a memory pool to share with other graphs (``torch.cuda.graph_pool_handle()``), or None.
        tokens: OpenVLA only, for measurement: capture the step generating this many action tokens (1: the prefill
            alone) and return their ids on the host; None: the model's action dimension and its actions.

    Calling it with tensors of the same signature copies them in, replays and returns what ``predict_action``
    returns. It replays what was captured whatever is attached to ``vla`` later (:class:`CapturedPolicy` checks).
    """

    def __init__(self, vla: nn.Module, example: Inputs, unnorm_key: str | None = None, warmup: int = 2,
                 pool: Any = None, tokens: int | None = None) -> None:
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
            raise ValueError(f"warmup={warmup!r} is not allowed; use an integer >= 1")
        self.family = check_capturable(vla)
        if tokens is not None and (self.family != "openvla" or isinstance(tokens, bool) or not isinstance(tokens, int)
                                   or tokens < 1):
            raise ValueError(f"tokens={tokens!r} is not allowed; an integer >= 1, on an OpenVLA model only")
        self.tokens = tokens
        self.model = unwrap_vla(vla)
        self.unnorm_key = self.model._check_unnorm_key(unnorm_key)
        self.parts = PARTS[self.family]
        self.handles = tuple(live_handles(vla))  # the graph reads their tensors: keep them alive
        check_replayable(self.handles)
        self.signature = signature(example)
        device = model_device(vla)
        self.inputs = {name: t.detach().to(device).clone() for name, t in example.items()}
        action_dim = tokens or self.model.get_action_dim(self.unnorm_key)
        make_cache = (lambda: ready_cache(self.model.language_model, self.inputs["pixel_values"].new_empty(
            0, dtype=self._dtype()))) if self.parts.needs_cache else (lambda: None)
        self.graph, self.outputs = capture(functools.partial(self._device_part, action_dim), make_cache, device,
                                           warmup, pool)

    def _dtype(self) -> torch.dtype:
        return self.model.get_input_embeddings().weight.dtype

    def _device_part(self, action_dim: int, cache: Any) -> tuple[torch.Tensor, ...]:
        with reduction_call(self.model):  # one top-level call: the sites hand their choices on inside it
            return self.parts.device(self.model, action_dim, self.inputs, cache)

    def __call__(self, inputs: Inputs) -> Any:
        """Replay on ``inputs`` (same :func:`signature` as the example); returns ``predict_action``'s result."""
        if signature(inputs) != self.signature:
            raise ValueError(f"inputs {signature(inputs)} differ from the captured {self.signature}")
        for name, t in inputs.items():
            self.inputs[name].copy_(t)
        self.graph.replay()
        if self.tokens is not None:
            return self.outputs[0].cpu().numpy()
        return self.parts.host(self.model, self.outputs, self.unnorm_key)


class CapturedPolicy:
    """``vla.predict_action`` from CUDA graphs: one :class:`CapturedStep` per input signature and unnorm key,
    captured at its first call, all dropped when the reductions attached to ``vla`` change or its parameters are
    replaced (see the module docstring).

    >>> policy = CapturedPolicy(vla)                       # vla: native OpenVLA / OFT on a CUDA GPU
    >>> action = policy.predict_action(**inputs, unnorm_key="bridge_orig")   # first call captures, later replay
    >>> apply_token_reduction_spec(vla, "vision:diverse:0.1@0.25")           # the next call captures again
    """

    def __init__(self, vla: nn.Module, warmup: int = 2) -> None:
        self.family = check_capturable(vla)
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
            raise ValueError(f"warmup={warmup!r} is not allowed; use an integer >= 1")
        self.vla, self.warmup = vla, warmup
        self.steps: dict[tuple, CapturedStep] = {}
        self._under: tuple = ()
        self._weights: tuple = ()
        self._pool: Any = None

    def _state(self) -> tuple[tuple, tuple]:
        first = next(unwrap_vla(self.vla).parameters())
        return tuple(live_handles(self.vla)), (first.data_ptr(), first.dtype, first.device)

    def reset(self) -> None:
        """Drop every graph (the next call captures again)."""
        self.steps, self._pool = {}, None

    def predict_action(self, input_ids: torch.Tensor | None = None, pixel_values: torch.Tensor | None = None,
                       unnorm_key: str | None = None, attention_mask: torch.Tensor | None = None,
                       proprio: Any = None, do_sample: bool = False) -> Any:
        """What ``vla.predict_action`` returns for the same arguments (OpenVLA: the actions; OFT: the pair
        ``(actions, hidden)``), from a replayed graph. ``ValueError`` for ``do_sample=True``."""
        if do_sample:
            raise ValueError("do_sample=True is not allowed on a captured policy (greedy decoding only)")
        key = unwrap_vla(self.vla)._check_unnorm_key(unnorm_key)
        inputs = call_inputs(self.family, input_ids, pixel_values, attention_mask, proprio)
        handles, weights = self._state()
        if len(handles) != len(self._under) or any(a is not b for a, b in zip(handles, self._under, strict=True)) \
                or weights != self._weights:
            self.reset()
            self._under, self._weights = handles, weights
        step_key = (signature(inputs), key)
        step = self.steps.get(step_key)
        if step is None:
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            step = self.steps[step_key] = CapturedStep(self.vla, inputs, key, self.warmup, self._pool)
        return step(inputs)
