"""One OpenVLA-OFT control step split into phases, beside :class:`~prismatic_tr.bench.vla.step.PolicyStep`.

A step of :class:`~prismatic_tr.models.NativeOpenVLAOFT` is: vision backbone (each image on its own, unreduced
features; reduced inside the towers for the vision site) -> the live site's finish (the projector site reduces
there) -> projector, then the proprio token appended -> ONE language-model pass over ``[BOS, visual, proprio,
prompt, action slots, stop]`` -> the head reading the chunk from the slots' hidden states (OFT's L1 MLP, or the
language model's argmax for the discrete variant), copied to the host once, as ``predict_action`` does.

Each phase calls the model's own method (``vision_backbone.forward``, ``projector``, ``append_proprio``,
``run_action_pass``, ``actions_from_hidden``); only ``predict_action``'s un-normalisation is left out of the timed
phases, so end to end (the model's ``predict_action``) minus the phase sum is that and Python overhead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from prismatic_tr.bench.vla.phases import OFT_STEP
from prismatic_tr.bench.vla.step import PhaseCall, StepBase, plain_call
from prismatic_tr.models import NativeOpenVLAOFT
from prismatic_tr.models.oft import unnormalize_oft_actions
from prismatic_tr.vla.scope import reduction_call


@dataclass
class OFTStepOutput:
    """Result of one OFT step: normalised actions (B, chunk, action_dim) on the host, the shapes met on the way,
    the length of the one pass's sequence and the visual tokens it held."""

    actions: np.ndarray
    shapes: dict[str, list[int]]
    seq_len: int
    llm_visual_tokens: int


@dataclass
class OFTAnswer:
    """The model's own ``predict_action`` on the inputs: un-normalised actions (B, chunk, action_dim), float64."""

    actions: np.ndarray


class OFTStep(StepBase):
    """The phases of one OpenVLA-OFT control step of ``vla`` on fixed inputs (see the module docstring).

    Args:
        vla: a :class:`~prismatic_tr.models.NativeOpenVLAOFT`, possibly wrapped.
        inputs: prompt, ``n`` images as (B, n * 6, H, W) and proprio (B, proprio_dim) when the model has a proprio
            projector (:class:`~prismatic_tr.bench.vla.step.StepInputs`).
    """

    phases = OFT_STEP

    def phase_model(self, model: nn.Module) -> nn.Module:
        if not isinstance(model, NativeOpenVLAOFT):
            raise ValueError(f"OFTStep needs a NativeOpenVLAOFT model, got {type(model).__name__}")
        return model

    def project(self, features: torch.Tensor) -> torch.Tensor:
        """(B, K, D) -> (B, K (+ 1), llm_dim): projected visual tokens, then the proprio token where given."""
        return self.model.append_proprio(self.model.projector(features), self.inputs.proprio)

    def llm(self, observation: torch.Tensor) -> torch.Tensor:
        """The one parallel pass; (B, S, llm_dim) hidden states of the S = chunk x action_dim action slots."""
        return self.model.run_action_pass(self.prompt, observation)

    def head(self, hidden: torch.Tensor) -> np.ndarray:
        """(B, S, D) -> (B, chunk, action_dim) normalised actions on the host (the model's own head and copy)."""
        return self.model.actions_from_hidden(hidden)

    def run(self, call: PhaseCall | None = None) -> OFTStepOutput:
        """One full step; ``call(name, fn)`` as in :meth:`PolicyStep.run` (time or count each phase)."""
        call = call or plain_call
        with reduction_call(self.user_model) as record:  # the phases are one top-level call of the model
            features = call("vision", self.vision)
            reduced = call("reducer", lambda: self.finish(features))
            observation = call("projector", lambda: self.project(reduced))
            hidden = call("llm", lambda: self.llm(observation))
            actions = call("head", lambda: self.head(hidden))
        shapes = {
            "pixel_values_shape": list(self.inputs.pixel_values.shape),
            "vision_features_shape": list(features.shape),
            "reduced_features_shape": list(reduced.shape),
            "projected_shape": list(observation.shape),
            "action_hidden_shape": list(hidden.shape),
            "actions_shape": list(actions.shape),
        }
        seq_len = self._sequence_length(observation.shape[1])
        return OFTStepOutput(actions, shapes, seq_len, self.llm_visual_tokens(record, reduced.shape[1]))

    def _sequence_length(self, observation_tokens: int) -> int:
        """Tokens of the one pass: BOS, observation (visual + proprio), the rest of the prompt, slots, stop."""
        return self.prompt.ids.shape[1] + observation_tokens + self.model.oft.num_action_slots + 1

    def answer(self, predicted: Any) -> OFTAnswer:
        """The model's answer from what its own ``predict_action`` returned on the step's inputs (OFT's pair:
        actions, slot hidden states; the benchmark keeps one of its calls), as (B, chunk, dim)."""
        chunk = predicted[0] if isinstance(predicted, tuple) else predicted
        actions = np.asarray(chunk, dtype=np.float64)
        return OFTAnswer(actions.reshape(self.inputs.input_ids.shape[0], *actions.shape[-2:]))

    def fidelity(self, base: OFTAnswer, other: OFTAnswer, out: OFTStepOutput, unnorm_key: str) -> dict:
        """``action_mae`` / ``action_max_abs`` of ``other`` against ``base`` (un-normalised, same inputs), and
        ``step_action_max_diff``: how far the timed step's actions are from ``other``'s ``predict_action``.
        No action tokens in OFT's L1 head: the token agreement and first-token KL are None."""
        step = unnormalize_oft_actions(out.actions, self.model.get_action_stats(unnorm_key),
                                       self.model.oft.normalization)
        delta = np.abs(base.actions - other.actions)
        return {"action_token_agreement": None, "first_token_kl": None, "action_mae": float(delta.mean()),
                "action_max_abs": float(delta.max()),
                "step_action_max_diff": float(np.abs(step.reshape(other.actions.shape) - other.actions).max())}
