"""What OpenVLA-OFT adds to an OpenVLA config: images per sample, proprio, action chunk, head, attention.

OFT's checkpoints carry OpenVLA's ``config.json`` unchanged (``model_type`` "openvla"); the chunk length, action and
proprio sizes and the normalisation come from OFT's ``prismatic/vla/constants.py``, which picks a robot platform
(LIBERO unless the command line names ALOHA or BRIDGE). :data:`OFT_PLATFORMS` holds those constants;
:class:`OFTSettings` is the one typed record of them, kept in the config as the ``oft`` dict (an extension that
OFT's and OpenVLA's code ignore).

Attention over the one parallel pass (``attention``):

* ``"causal"``: what OFT's public code computes on stock transformers (4.40.1: its all-ones mask becomes causal).
* ``"bidirectional"``: what OFT's own transformers fork computes, the one its published checkpoints were trained
  with: no causal mask at all, every position attends to every (real) position (moojink/openvla-oft#27, #89).
* ``"bidirectional_actions"``: causal over the prompt, the action slots attend to one another both ways.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, fields
from typing import Any

from .backbones import check_choice
from .config import NativeOpenVLAConfig

ACTION_HEADS = ("l1_regression", "discrete")
ATTENTIONS = ("causal", "bidirectional", "bidirectional_actions")
NORMALIZATIONS = ("bounds_q99", "bounds")
MAX_IMAGES = 3  # OFT's models take a third-person image and up to two wrist images


@dataclass(frozen=True)
class OFTPlatform:
    """One robot platform of OFT's constants."""

    num_actions_chunk: int
    action_dim: int
    proprio_dim: int
    normalization: str


# follows OpenVLA-OFT 213c5ff8 prismatic/vla/constants.py (MIT, see NOTICE): the platforms' chunk, action and proprio
# sizes and normalisation, so a checkpoint trained for one of them acts as OFT's code makes it act.
OFT_PLATFORMS: dict[str, OFTPlatform] = {
    "libero": OFTPlatform(8, 7, 8, "bounds_q99"),
    "aloha": OFTPlatform(25, 14, 14, "bounds"),
    "bridge": OFTPlatform(5, 7, 7, "bounds_q99"),
}
DEFAULT_PLATFORM = "libero"  # OFT's default when the command line names no platform


def _positive(name: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        allowed = "a positive int" + (" or None" if allow_none else "")
        raise ValueError(f"{name}={value!r}; allowed: {allowed}")


@dataclass(frozen=True)
class OFTSettings:
    """OFT's additions to OpenVLA (see the module docstring).

    num_images_in_input: images per sample, 1 to 3 (third-person first, then wrist images).
    num_actions_chunk, action_dim: the chunk predicted in one pass (num_actions_chunk * action_dim action slots).
    proprio_dim: size of the proprio state, or None when the model has no proprio projector.
    action_head: "l1_regression" (OFT's MLP head on the slots' hidden states) or "discrete" (the language model's
        logits at the slots, argmax, OpenVLA's bins).
    head_hidden_dim: the L1 head's width; None: the language model's hidden size (as OFT builds it).
    attention: "causal", "bidirectional" or "bidirectional_actions".
    normalization: "bounds_q99" (q01 / q99) or "bounds" (min / max) for un-normalising actions.
    stop_token_id: the token after the action slots (OFT: Llama-2's "</s>", 2).
    proprio_slots: ours, not OFT's (False: OFT's model): every action slot's input is the proprio token instead of
        OFT's zero embedding, so the state reaches the slots without an attention head having to single out one
        token among the visual ones. OFT's code ignores the ``oft`` dict, so it would run such a checkpoint as
        if False; needs ``proprio_dim``.
    """

    num_images_in_input: int = 1
    num_actions_chunk: int = 8
    action_dim: int = 7
    proprio_dim: int | None = 8
    action_head: str = "l1_regression"
    head_hidden_dim: int | None = None
    attention: str = "causal"
    normalization: str = "bounds_q99"
    stop_token_id: int = 2
    proprio_slots: bool = False

    def __post_init__(self) -> None:
        _positive("num_images_in_input", self.num_images_in_input)
        if self.num_images_in_input > MAX_IMAGES:
            raise ValueError(f"num_images_in_input={self.num_images_in_input}; allowed: 1 to {MAX_IMAGES}")
        _positive("num_actions_chunk", self.num_actions_chunk)
        _positive("action_dim", self.action_dim)
        _positive("proprio_dim", self.proprio_dim, allow_none=True)
        _positive("head_hidden_dim", self.head_hidden_dim, allow_none=True)
        check_choice("action_head", self.action_head, ACTION_HEADS)
        check_choice("attention", self.attention, ATTENTIONS)
        check_choice("normalization", self.normalization, NORMALIZATIONS)
        if isinstance(self.stop_token_id, bool) or not isinstance(self.stop_token_id, int) or self.stop_token_id < 0:
            raise ValueError(f"stop_token_id={self.stop_token_id!r}; allowed: a token id >= 0")
        if not isinstance(self.proprio_slots, bool):
            raise ValueError(f"proprio_slots={self.proprio_slots!r}; allowed: True or False")
        if self.proprio_slots and self.proprio_dim is None:
            raise ValueError("proprio_slots=True needs a proprio state (proprio_dim), and proprio_dim is None")

    @property
    def num_action_slots(self) -> int:
        """Placeholder tokens after the prompt: one per action dimension of every chunk step."""
        return self.num_actions_chunk * self.action_dim

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> OFTSettings:
        """Settings from a dict (a ``platform`` key first fills the platform's sizes); unknown keys are a
        ValueError listing the allowed ones."""
        data = dict(data or {})
        platform = data.pop("platform", None)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown OFT setting(s) {unknown}; allowed: {sorted(known | {'platform'})}")
        base = asdict(platform_settings(platform)) if platform is not None else {}
        return cls(**{**base, **data})


def platform_settings(platform: str) -> OFTSettings:
    """The settings of one of OFT's platforms ("libero", "aloha", "bridge"), L1 head, causal attention."""
    check_choice("platform", platform, OFT_PLATFORMS)
    p = OFT_PLATFORMS[platform]
    return OFTSettings(num_actions_chunk=p.num_actions_chunk, action_dim=p.action_dim, proprio_dim=p.proprio_dim,
                       normalization=p.normalization)


def synthetic_proprio_stats(dim: int) -> dict[str, list[Any]]:
    """A dataset's ``"proprio"`` statistics block for random-weight presets: bounds [-1, 1] on every dimension (a
    state in [-1, 1] is then passed through unchanged by OFT's normalisation)."""
    return {"q01": [-1.0] * dim, "q99": [1.0] * dim, "min": [-1.0] * dim, "max": [1.0] * dim, "mean": [0.0] * dim,
            "std": [0.5] * dim}


# OFT presets: name -> (the OpenVLA preset whose towers, projector and Llama it takes, its OFT settings). Both take two
# 224 px images (third-person + wrist), proprio 8, a chunk of 8 x 7 actions and the L1 head (OFT's LIBERO setup).
# "openvla-oft-7b" has OpenVLA-OFT-7B's sizes (random weights: for timing on a GPU, built off the meta device).
OFT_PRESETS: dict[str, tuple[str, OFTSettings]] = {
    "tiny-oft": ("tiny", OFTSettings(num_images_in_input=2)),
    "cpu-bench-oft": ("cpu-bench", OFTSettings(num_images_in_input=2)),
    "openvla-oft-7b": ("openvla-7b", OFTSettings(num_images_in_input=2)),
}


class NativeOpenVLAOFTConfig(NativeOpenVLAConfig):
    """OpenVLA's config plus ``oft`` (the :class:`OFTSettings` as a dict); ``model_type`` stays "openvla", as in
    OFT's checkpoints."""

    def __init__(self, oft: dict[str, Any] | OFTSettings | None = None, **kwargs: Any) -> None:
        settings = oft if isinstance(oft, OFTSettings) else OFTSettings.from_dict(copy.deepcopy(oft))
        self.oft = asdict(settings)
        super().__init__(**kwargs)

    @property
    def oft_settings(self) -> OFTSettings:
        return OFTSettings(**self.oft)
