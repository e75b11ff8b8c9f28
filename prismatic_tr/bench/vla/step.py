"""One OpenVLA control step split into phases, so each phase can be timed or counted on its own.

A step is: vision backbone (unreduced features) -> token reducer -> projector -> prefill (the language
model over the multimodal prompt, filling a KV cache) -> greedy decode of the remaining action tokens.

The language-model phases use the reference model's own generation code
(:mod:`prismatic_tr.models.generation`, the same calls ``generate`` makes): the prefill yields the
logits of the first action token, ``decode`` picks it greedily and runs ``num_action_tokens - 1``
single-token cached forwards for the rest. The LM head sees the last position only. Nothing in the step
syncs with the host: the greedy token stays on the device between forwards. Prompts must not be padded
(one instruction for the whole batch).

:class:`StepBase` holds what OpenVLA's step shares with OpenVLA-OFT's (:mod:`prismatic_tr.bench.vla.oft_step`):
inputs and prompt, the unreduced vision phase, the live site's finish, the projector, the model's own
``predict_action``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from torch import nn

from prismatic_tr.bench.measure.flops import count_macs
from prismatic_tr.bench.measure.timing import Timer
from prismatic_tr.bench.vla.phases import OPENVLA_STEP, PHASES, StepPhases  # noqa: F401  (PHASES re-exported)
from prismatic_tr.models.generation import DecodeState, decode_loop
from prismatic_tr.models.generation import prefill as lm_prefill
from prismatic_tr.vla import get_token_reduction, unwrap_vla
from prismatic_tr.vla.scope import CallRecord, reduction_call

REQUIRED_API: tuple[str, ...] = ("build_multimodal_inputs", "make_prompt", "generate", "predict_action")

T = TypeVar("T")
PhaseCall = Callable[[str, Callable[[], T]], T]


@dataclass
class StepInputs:
    """Processor outputs on the model's device.

    input_ids: (B, L) long; attention_mask: (B, L) long/bool; pixel_values: (B, C, H, W) in the
    vision backbone's dtype (C = 6 for the fused DINOv2 + SigLIP backbone, n * 6 for OpenVLA-OFT's n images);
    proprio: (B, proprio_dim) float32 normalised state (OpenVLA-OFT), or None.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    pixel_values: torch.Tensor
    proprio: torch.Tensor | None = None


@dataclass
class Prefilled:
    """State after the prefill: logits of the first action token (B, V), the decode state (KV cache,
    mask, positions) and the prompt length S = L + K."""

    logits: torch.Tensor
    state: DecodeState
    seq_len: int


@dataclass
class StepOutput:
    """Result of one step: action tokens (B, A), first-token logits (B, V), and the shapes met on the way."""

    tokens: torch.Tensor
    first_logits: torch.Tensor
    shapes: dict[str, list[int]]
    seq_len: int
    llm_visual_tokens: int  # visual tokens the LLM's last layers kept (fewer than projected with the llm site)


def prepare_inputs(vla: nn.Module, sample_inputs: dict[str, torch.Tensor], device: torch.device) -> StepInputs:
    """Move processor outputs to ``device`` and cast ``pixel_values`` to the backbone's dtype."""
    missing = [k for k in ("input_ids", "pixel_values") if k not in sample_inputs]
    if missing:
        raise ValueError(f"sample_inputs lacks {missing}; pass processor outputs with input_ids, pixel_values")
    model = unwrap_vla(vla)
    dtype = next(model.vision_backbone.parameters()).dtype
    ids = sample_inputs["input_ids"].to(device)
    mask = sample_inputs.get("attention_mask")
    mask = torch.ones_like(ids) if mask is None else mask.to(device)
    if not bool(mask.bool().all()):  # checked once here, never on the timed path
        raise ValueError("sample_inputs has a padded attention_mask; benchmark one instruction per batch")
    proprio = sample_inputs.get("proprio")
    proprio = None if proprio is None else torch.as_tensor(proprio, dtype=torch.float32).to(device)
    return StepInputs(ids, mask, sample_inputs["pixel_values"].to(device=device, dtype=dtype), proprio)


def phase_model(model: nn.Module) -> nn.Module:
    """The model whose pieces the phases call: ``model`` itself when it has this package's inference API (the
    native model), else :class:`prismatic_tr.models.OpenVLAAdapter` over it (OpenVLA's remote-code model: its own
    vision backbone, projector and language model, this package's prompt and decode loop)."""
    if all(callable(getattr(model, a, None)) for a in REQUIRED_API):
        return model
    from prismatic_tr.models.adapter import OpenVLAAdapter

    return OpenVLAAdapter(model)


class StepBase:
    """What every benchmarked step shares: the model, its inputs and prompt, the unreduced vision phase, the live
    site's finish, the projector, and the model's own ``predict_action`` on the same inputs.

    Args:
        vla: the model, possibly wrapped (PEFT, DDP, ``torch.compile``).
        inputs: the prompt, image(s) and proprio, see :class:`StepInputs`.
    """

    phases: StepPhases  # the phases run() calls, in order (phases.py)

    def __init__(self, vla: nn.Module, inputs: StepInputs) -> None:
        self.user_model = unwrap_vla(vla)  # the model whose predict_action users call
        self.model = self.phase_model(self.user_model)
        self.inputs = inputs
        # The prompt exactly as predict_action prepares it (OpenVLA's empty token appended where missing).
        self.prompt = self.model.make_prompt(inputs.input_ids, inputs.attention_mask, for_actions=True)
        with torch.no_grad():
            self.num_patches = int(self.vision().shape[1])  # unreduced (call before attaching reductions)

    def phase_model(self, model: nn.Module) -> nn.Module:
        """The model whose pieces the phases call (:func:`phase_model`)."""
        return phase_model(model)

    def predict_action(self, unnorm_key: str) -> np.ndarray:
        """The user's model's own ``predict_action`` on the step's inputs (greedy): what a control loop calls."""
        i = self.inputs
        extra = {"proprio": i.proprio} if i.proprio is not None else {}
        return self.user_model.predict_action(input_ids=i.input_ids, pixel_values=i.pixel_values,
                                              attention_mask=i.attention_mask, unnorm_key=unnorm_key, do_sample=False,
                                              **extra)

    @staticmethod
    def llm_visual_tokens(record: CallRecord, projected: int) -> int:
        """Visual tokens the LLM kept in the step's prefill: the llm site's choice if attached, else all."""
        return int(record.llm_kept.shape[1]) if record.llm_kept is not None else projected

    def vision(self) -> torch.Tensor:
        """Unreduced backbone features (B, N, D); ``forward`` bypasses the reduction hook."""
        return self.model.vision_backbone.forward(self.inputs.pixel_values)

    def project(self, features: torch.Tensor) -> torch.Tensor:
        """(B, K, D) -> (B, K, llm_dim)."""
        return self.model.projector(features)

    def finish(self, features: torch.Tensor) -> torch.Tensor:
        """What the projector receives from unreduced ``features``: the live projector / vision site's
        ``finish_forward`` (reduces, or collects what the towers kept, and hands the positions on), else the
        features themselves."""
        handle = get_token_reduction(self.user_model)
        return handle.finish_forward(features) if handle is not None else features


class PolicyStep(StepBase):
    """The phases of one OpenVLA control step of ``vla`` on fixed inputs.

    Args:
        vla: an OpenVLA model (native, or OpenVLA's remote-code model: phases through
            :func:`phase_model`), possibly wrapped (PEFT, DDP, ``torch.compile``).
        inputs: the prompt and image(s), see :class:`StepInputs`.
        num_action_tokens: tokens decoded per step (7 for OpenVLA).
    """

    phases = OPENVLA_STEP

    def __init__(self, vla: nn.Module, inputs: StepInputs, num_action_tokens: int = 7) -> None:
        if num_action_tokens < 1:
            raise ValueError(f"num_action_tokens={num_action_tokens} is not allowed; use an integer >= 1")
        self.num_action_tokens = num_action_tokens
        super().__init__(vla, inputs)

    def prefill(self, projected: torch.Tensor) -> Prefilled:
        """Language model over [BOS, visual tokens (K), text]: fills the cache; logits of action token 1."""
        embeds, mask, _ = self.model.build_multimodal_inputs(
            self.prompt.ids.to(projected.device), self.prompt.key_mask, projected
        )
        logits, state = lm_prefill(self.model.language_model, embeds, mask)
        return Prefilled(logits, state, embeds.shape[1])

    def decode(self, state: Prefilled) -> torch.Tensor:
        """Greedy action tokens (B, A): token 1 from the prefill logits, then A - 1 cached forwards."""
        tokens, _ = decode_loop(self.model.language_model, state.logits, state.state, self.num_action_tokens)
        return tokens

    def run(self, call: PhaseCall | None = None) -> StepOutput:
        """One full step. ``call(name, fn)`` runs phase ``name`` as ``fn()`` and returns its result; use it
        to time (``timed_call``) or count each phase. The default just calls ``fn()``."""
        call = call or plain_call
        with reduction_call(self.user_model) as record:  # the phases are one top-level call of the model
            features = call("vision", self.vision)
            reduced = call("reducer", lambda: self.finish(features))
            projected = call("projector", lambda: self.project(reduced))
            state = call("prefill", lambda: self.prefill(projected))
            tokens = call("decode", lambda: self.decode(state))
        shapes = {
            "pixel_values_shape": list(self.inputs.pixel_values.shape),
            "vision_features_shape": list(features.shape),
            "reduced_features_shape": list(reduced.shape),
            "projected_shape": list(projected.shape),
            "action_tokens_shape": list(tokens.shape),
        }
        return StepOutput(tokens, state.logits, shapes, state.seq_len,
                          self.llm_visual_tokens(record, projected.shape[1]))


def plain_call(name: str, fn: Callable[[], T]) -> T:
    """A ``call`` that just runs the phase."""
    return fn()


def timed_call(timer: Timer) -> PhaseCall:
    """A ``call`` for :meth:`PolicyStep.run` that times each phase with ``timer`` (between start/stop)."""

    def call(name: str, fn: Callable[[], T]) -> T:
        with timer.phase(name):
            return fn()

    return call


def counted_call(macs: dict[str, int]) -> PhaseCall:
    """A ``call`` for :meth:`PolicyStep.run` that stores each phase's MACs (``count_macs``) in ``macs``."""

    def call(name: str, fn: Callable[[], T]) -> T:
        box: list[T] = []
        macs[name] = count_macs(lambda: box.append(fn()))
        return box[0]

    return call
