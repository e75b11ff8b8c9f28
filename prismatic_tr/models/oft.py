"""``NativeOpenVLAOFT``: OpenVLA-OFT (moojink/openvla-oft) natively, one parallel pass per action chunk.

The towers, projector and Llama of :class:`~prismatic_tr.models.modeling.NativeOpenVLA` (same names, same
checkpoint keys), plus OFT's additions (:mod:`.oft_modules`): 1-3 images per sample (``vision_backbone``
encodes each on its own and concatenates their tokens, ``get_num_patches()`` per image,
``get_num_images_in_input()`` / ``set_num_images_in_input()``), a proprio projector (one token after the visual
tokens), ``chunk x action_dim`` action slots after the prompt, ONE language-model pass over
``[BOS, visual, proprio, prompt, slots, stop]`` (:mod:`.oft_pass`; causal, or bidirectional through an explicit
4-D mask, :class:`~.oft_config.OFTSettings.attention`), and the actions read from the slots: OFT's L1-regression
MLP head on their last hidden states, or the language model's argmax there mapped to OpenVLA's bins. FiLM and
the diffusion head are not built. Ours, not OFT's: ``oft.proprio_slots`` feeds the proprio token to every action
slot in place of OFT's zero embedding. Visual tokens are counted from tensors, so a reduction before the language
model (``prismatic_tr.vla``'s projector and vision sites) needs nothing from this class.

Persistence (:mod:`.oft_checkpoint`) uses OFT's layout: OpenVLA's ``config.json`` + safetensors for the VLA,
``action_head--*_checkpoint.pt``, ``proprio_projector--*_checkpoint.pt``, ``dataset_statistics.json``.
"""

from __future__ import annotations

import copy
import importlib.util
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from prismatic_tr.llm.calls import announce_prefill
from prismatic_tr.reducers.tensor_ops import take_along

from .checkpoint import auto_maps, load_weights_
from .config import NativeOpenVLAConfig
from .generation import every_layer_gets
from .init_utils import parameters_on_meta
from .modeling import NativeOpenVLA, load_config, read_config_dict
from .oft_checkpoint import infer_settings, load_components_, read_statistics, save_components
from .oft_config import NativeOpenVLAOFTConfig, OFTSettings
from .oft_lora import adapter_base, merge_adapter_, unmerged_adapter
from .oft_modules import L1RegressionActionHead, OFTVisionBackbone, ProprioProjector
from .oft_pass import action_sequence, attention_bias, insert_after_bos, insert_flags, slot_hidden_index
from .prompt import Prompt

_NORM_KEYS = {"bounds_q99": ("q01", "q99"), "bounds": ("min", "max")}


def _bounds(stats: dict[str, Any], normalization: str, what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low, high, mask) of one statistics block for OFT's normalisation type ("bounds_q99": q01 / q99, "bounds":
    min / max; mask all set when absent). ValueError naming the type or the missing keys."""
    if normalization not in _NORM_KEYS:
        raise ValueError(f"normalization={normalization!r}; allowed: {sorted(_NORM_KEYS)}")
    low_key, high_key = _NORM_KEYS[normalization]
    missing = [k for k in (low_key, high_key) if k not in stats]
    if missing:
        raise ValueError(f"{what} statistics lack {missing} (normalization={normalization!r}); have {sorted(stats)}")
    low, high = np.array(stats[low_key]), np.array(stats[high_key])
    return low, high, np.asarray(stats.get("mask", np.ones_like(low, dtype=bool)), dtype=bool)


# follows OpenVLA-OFT 213c5ff8 prismatic/extern/hf/modeling_prismatic.py _unnormalize_actions (MIT, see NOTICE):
# 0.5 (a + 1)(high - low + 1e-8) + low where the mask is set, bounds by the platform's normalisation type.
def unnormalize_oft_actions(normalized: np.ndarray, stats: dict[str, Any], normalization: str) -> np.ndarray:
    """(..., A) actions in [-1, 1] -> raw scale as OFT does it (``normalization``: "bounds_q99" or "bounds")."""
    low, high, mask = _bounds(stats, normalization, "action")
    return np.where(mask, 0.5 * (normalized + 1) * (high - low + 1e-8) + low, normalized)


# follows OpenVLA-OFT 213c5ff8 prismatic/vla/datasets/rlds/utils/data_utils.py normalize_action_and_proprio (MIT, see
# NOTICE): how OFT's training data normalises actions: 2 (a - low) / (high - low + 1e-8) - 1, clipped to [-1, 1],
# where the mask is set (the gripper passes through); dimensions the data never moves (min == max) become 0.
def normalize_oft_actions(actions: np.ndarray, stats: dict[str, Any], normalization: str) -> np.ndarray:
    """(..., A) raw actions -> the [-1, 1] targets OFT trains its head on (inverse of
    :func:`unnormalize_oft_actions` inside the bounds; an unused dimension, min == max, is 0)."""
    low, high, mask = _bounds(stats, normalization, "action")
    out = np.where(mask, np.clip(2 * (actions - low) / (high - low + 1e-8) - 1, -1.0, 1.0), actions)
    if "min" in stats and "max" in stats:
        out = np.where(np.asarray(stats["min"]) == np.asarray(stats["max"]), 0.0, out)
    return out


# follows OpenVLA-OFT 213c5ff8 experiments/robot/openvla_utils.py normalize_proprio (MIT, see NOTICE): what OFT's
# get_vla_action does to the robot's state before predict_action: 2 (x - low) / (high - low + 1e-8) - 1 where the
# mask is set, clipped to [-1, 1].
def normalize_oft_proprio(state: np.ndarray, stats: dict[str, Any], normalization: str) -> np.ndarray:
    """(..., D) raw proprio state -> the normalised state OFT's ``predict_action`` takes (``stats``: the
    ``"proprio"`` block of a dataset's statistics; ``normalization``: "bounds_q99" or "bounds")."""
    low, high, mask = _bounds(stats, normalization, "proprio")
    return np.clip(np.where(mask, 2 * (state - low) / (high - low + 1e-8) - 1, state), -1.0, 1.0)


def camera_inputs(processor: Any, prompts: list[str], cameras: list[list[Any]]) -> dict[str, torch.Tensor]:
    """The processor's output for a batch with several cameras, as OFT's ``get_vla_action`` prepares it: every
    camera's images (``cameras[j]``: one PIL RGB image per prompt; the primary camera first, then the wrist ones)
    through ``processor(prompts, images)``, the pixel values concatenated on the channel axis (B, n * C, H, W)."""
    per_camera = [processor(prompts, images) for images in cameras]
    inputs = dict(per_camera[0])
    if len(per_camera) > 1:
        inputs["pixel_values"] = torch.cat([c["pixel_values"] for c in per_camera], dim=1)
    return inputs


# transformers 5 builds its masks in masking_utils, and reads the position ids on the host (packed-sequence detection)
# when a call has neither a mask nor a cache; a 4-D mask skips that whole step. transformers 4.40 has no such module
# and reads a 4-D mask on the host instead (its max), but nothing when the mask is None.
_MASK_SKIPS_PREPARATION = importlib.util.find_spec("transformers.masking_utils") is not None


def run_decoder(lm: nn.Module, inputs: torch.Tensor, bias: torch.Tensor | None,
                key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """``lm.model`` once over ``inputs`` (B, T, D), no cache, at positions 0 .. T - 1, every layer attending with
    ``bias`` (B, 1, T, T) additive, or causally when None; the last hidden states (B, T', D). No host sync on either
    stack: transformers gets no mask (4.40) or a placeholder 4-D one (5.x) that the layers never see.

    The pass announces itself as a prefill (:func:`prismatic_tr.llm.announce_prefill`, ``key_mask`` (B, T) real
    tokens first, or None): the ``llm`` reduction site then drops visual tokens after its layer for the rest of
    this pass (positions, rotary embeddings and ``bias`` gathered with them), so T' = T minus the tokens dropped;
    without that site T' = T."""
    b, t = inputs.shape[:2]
    placeholder = inputs.new_zeros(1, 1, 1, 1).expand(b, 1, t, t) if _MASK_SKIPS_PREPARATION else None
    positions = torch.arange(t, device=inputs.device).expand(b, t)
    with every_layer_gets(lm, bias), announce_prefill(lm.model, key_mask):
        out = lm.model(inputs_embeds=inputs, attention_mask=placeholder, position_ids=positions, use_cache=False)
    return out.last_hidden_state


class NativeOpenVLAOFT(NativeOpenVLA):
    """OpenVLA-OFT, natively (see the module docstring)."""

    vision_backbone_class = OFTVisionBackbone
    # the one pass announces itself and reads its slots behind whatever the llm site dropped (run_decoder), so that
    # site may be attached (OFT's own code reads the slots at fixed offsets and refuses it)
    llm_site_in_pass = True

    def __init__(self, config: NativeOpenVLAOFTConfig) -> None:
        super().__init__(config)
        s = config.oft_settings
        self.vision_backbone.set_num_images_in_input(s.num_images_in_input)
        llm_dim = config.text_config.hidden_size
        self.proprio_projector = ProprioProjector(llm_dim, s.proprio_dim) if s.proprio_dim is not None else None
        self.action_head = (L1RegressionActionHead(llm_dim, s.head_hidden_dim or llm_dim, s.action_dim,
                                                   s.num_actions_chunk)
                            if s.action_head == "l1_regression" else None)

    @property
    def oft(self) -> OFTSettings:
        return self.config.oft_settings

    # --- the one parallel pass ---
    def embed_observation(self, pixel_values: torch.Tensor, proprio: Any = None,
                          proprio_projector: nn.Module | None = None) -> torch.Tensor:
        """(B, n * C, H, W) images and optional (B, proprio_dim) state -> (B, n * K (+ 1), llm_dim): the projected
        visual tokens, then the proprio token."""
        return self.append_proprio(self.embed_images(pixel_values), proprio, proprio_projector)

    def append_proprio(self, visual: torch.Tensor, proprio: Any = None,
                       proprio_projector: nn.Module | None = None) -> torch.Tensor:
        """(B, V, llm_dim) projected visual tokens -> (B, V + 1, llm_dim) with the proprio token after them, or
        ``visual`` itself when ``proprio`` is None."""
        if proprio is None:
            if self.oft.proprio_slots:
                raise ValueError("this policy reads its state in the action slots (oft.proprio_slots=True): "
                                 "proprio is required, and it is None")
            return visual
        projector = proprio_projector if proprio_projector is not None else self.proprio_projector
        if projector is None:
            raise ValueError("proprio was given but this model has no proprio projector (oft.proprio_dim is None)")
        # as OFT: a float32 tensor first, then the features' dtype
        state = torch.as_tensor(np.asarray(proprio) if not torch.is_tensor(proprio) else proprio, dtype=torch.float32)
        state = state.to(visual.device, dtype=visual.dtype).reshape(visual.shape[0], -1)
        return torch.cat([visual, projector(state)[:, None]], dim=1)

    def run_action_pass(self, prompt: Prompt, observation: torch.Tensor) -> torch.Tensor:
        """One language-model pass; returns the (B, S, D) last hidden states that predict the S action slots.

        ``prompt``: ids (B, L) real tokens first, the empty token already there; ``observation``: (B, V, D) from
        :meth:`embed_observation`. The slots' inputs are zero (OFT), or with ``oft.proprio_slots`` the proprio token,
        which :meth:`append_proprio` put last in ``observation``.
        """
        s = self.oft
        slots = s.num_action_slots
        seq = action_sequence(prompt, slots, s.stop_token_id)
        embed = self.get_input_embeddings()
        ids = seq.ids.to(embed.weight.device)
        slot_flags = seq.slot.to(ids.device)[..., None]
        text = embed(ids) * (~slot_flags).to(embed.weight.dtype)
        if s.proprio_slots:
            text = text + slot_flags.to(observation.dtype) * observation[:, -1:]
        inputs = insert_after_bos(text, observation)
        v, b = observation.shape[1], inputs.shape[0]
        slot = insert_flags(seq.slot.to(ids.device), v, False)
        key_mask = insert_flags(seq.key_mask.to(ids.device), v, True) if seq.key_mask is not None else None
        bias = attention_bias(s.attention, slot, key_mask, inputs.dtype)
        hidden = run_decoder(self.language_model, inputs, bias, key_mask)
        dropped = inputs.shape[1] - hidden.shape[1]  # visual tokens the llm site dropped inside the pass (static)
        index = slot_hidden_index(seq.prompt_len, seq.ids.shape[1], v - dropped, slots, b, ids.device)
        return take_along(hidden, index)

    def head_output(self, hidden: torch.Tensor, action_head: Any = None) -> torch.Tensor:
        """(B, S, D) slot hidden states -> on the device: the L1 head's (B, S) normalised actions (float), or the
        language model's (B, S) argmax token ids for the discrete variant (int64)."""
        head = action_head if action_head is not None else self.action_head
        if head is not None:
            return head.predict_action(hidden).reshape(hidden.shape[0], -1)
        return self.language_model.lm_head(hidden).argmax(dim=-1)

    def normalized_chunk(self, output: torch.Tensor) -> np.ndarray:
        """:meth:`head_output` -> (B, chunk, action_dim) normalised actions on the host (the one copy)."""
        s = self.oft
        shape = (output.shape[0], s.num_actions_chunk, s.action_dim)
        if output.is_floating_point():
            return output.float().cpu().numpy().reshape(shape)
        return self.action_tokenizer.decode_token_ids_to_actions(output.cpu().numpy()).reshape(shape)

    def actions_from_hidden(self, hidden: torch.Tensor, action_head: Any = None) -> np.ndarray:
        """(B, S, D) slot hidden states -> (B, chunk, action_dim) normalised actions on the host (one copy)."""
        return self.normalized_chunk(self.head_output(hidden, action_head))

    def chunk_on_device(self, input_ids: torch.Tensor, pixel_values: torch.Tensor,
                        attention_mask: torch.Tensor | None = None, proprio: Any = None,
                        proprio_projector: nn.Module | None = None,
                        action_head: nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The part of :meth:`predict_action` that runs on the model's device: (:meth:`head_output`, the slots'
        (B, S, D) hidden states). No tensor value is read on the host (what a CUDA graph captures,
        :mod:`prismatic_tr.vla.cuda_graph`)."""
        prompt = self.make_prompt(input_ids, attention_mask, for_actions=True)
        hidden = self.run_action_pass(prompt, self.embed_observation(pixel_values, proprio, proprio_projector))
        return self.head_output(hidden, action_head), hidden

    def predict_chunk(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """(B, chunk, action_dim) normalised actions from the L1 head for a collated batch
        (:class:`prismatic_tr.data.oft.OFTCollator`: pixel_values, input_ids, attention_mask, proprio): the one
        parallel pass of :meth:`predict_action`, with gradients (the training forward). A top-level call like
        ``predict_action``: with a reduction attached it runs in a call of its own (:mod:`prismatic_tr.vla.scope`),
        so the kept tokens' positions and a merge's sizes apply in training as at inference."""
        prompt = self.make_prompt(batch["input_ids"], batch["attention_mask"], for_actions=True)
        dtype = self.get_input_embeddings().weight.dtype
        observation = self.embed_observation(batch["pixel_values"].to(dtype), batch["proprio"])
        return self.action_head.predict_action(self.run_action_pass(prompt, observation))

    def actions_on_host(self, output: torch.Tensor, hidden: torch.Tensor,
                        unnorm_key: str) -> tuple[np.ndarray, torch.Tensor]:
        """The rest of :meth:`predict_action`: OFT's pair from :meth:`chunk_on_device`'s outputs."""
        normalized = self.normalized_chunk(output)
        actions = unnormalize_oft_actions(normalized, self.get_action_stats(unnorm_key), self.oft.normalization)
        return (actions[0] if actions.shape[0] == 1 else actions), hidden

    @torch.no_grad()
    def predict_action(
        self,
        input_ids: torch.Tensor | None = None,
        unnorm_key: str | None = None,
        proprio: Any = None,
        proprio_projector: nn.Module | None = None,
        action_head: nn.Module | None = None,
        noisy_action_projector: nn.Module | None = None,
        use_film: bool = False,
        pixel_values: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        do_sample: bool = False,
    ) -> tuple[np.ndarray, torch.Tensor]:
        """OFT's pair ``(actions, hidden)``: the un-normalised actions, (chunk, action_dim) for a batch of one,
        (B, chunk, action_dim) otherwise, and the slots' last hidden states (B, S, D), S = chunk x action_dim.

        OFT's calling and return convention (``actions, _ = vla.predict_action(...)`` in its ``get_vla_action``):
        ``proprio`` is the normalised state (B, proprio_dim) or (proprio_dim,); ``proprio_projector`` /
        ``action_head`` default to the model's own (OFT's modules may be passed instead); the empty token 29871 is
        appended where a prompt lacks it. A padded batch (``attention_mask``) is allowed. Diffusion
        (``noisy_action_projector``), FiLM and sampling are not built: ValueError.
        """
        if noisy_action_projector is not None or use_film or do_sample:
            raise ValueError("the native OFT model builds the L1-regression and discrete heads only: "
                             "noisy_action_projector (diffusion), use_film=True and do_sample=True are not allowed")
        if input_ids is None or pixel_values is None:
            raise ValueError("predict_action needs input_ids and pixel_values")
        key = self._check_unnorm_key(unnorm_key)
        output, hidden = self.chunk_on_device(input_ids, pixel_values, attention_mask, proprio, proprio_projector,
                                              action_head)
        return self.actions_on_host(output, hidden, key)

    def get_action_dim(self, unnorm_key: str | None = None) -> int:
        """The action dimension of one chunk step (OFT's ``ACTION_DIM``)."""
        return self.oft.action_dim

    # --- persistence (OFT's layout, see oft_checkpoint) ---
    def weights_module(self) -> nn.Module:
        """The VLA without OFT's heads: what goes into (and comes from) the safetensors files."""
        view = nn.Module()
        for name in ("vision_backbone", "projector", "language_model"):
            view.add_module(name, getattr(self, name))
        return view

    def save_pretrained(self, save_directory: str | os.PathLike, **kwargs: Any) -> None:
        """OpenVLA's files (``config.json`` with the ``oft`` settings, safetensors without the heads), then
        ``action_head--latest_checkpoint.pt``, ``proprio_projector--latest_checkpoint.pt`` (those the model has) and
        ``dataset_statistics.json``, as OFT's fine-tuning writes them. The image count saved is the backbone's now."""
        self.config.oft = {**self.config.oft, "num_images_in_input": self.vision_backbone.get_num_images_in_input()}
        super().save_pretrained(save_directory, **kwargs)
        save_components(self, save_directory)

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike,
        torch_dtype: torch.dtype | None = None,
        device: str | torch.device | None = None,
        oft: dict[str, Any] | None = None,
        base: str | os.PathLike | None = None,
        **_: Any,
    ) -> NativeOpenVLAOFT:
        """Load an OFT checkpoint directory (OFT's layout, module docstring) without running its code.

        A directory whose LoRA is not merged (``lora_adapter/`` and no model weights, :mod:`.oft_lora`) loads the
        base checkpoint ``base`` (default: the adapter's ``base_model_name_or_path``) and merges the adapter.

        ``oft``: settings the files do not hold or to change (``platform``, ``num_images_in_input``, ``attention``,
        any :class:`OFTSettings` field). ``dataset_statistics.json``, when present, replaces the config's
        ``norm_stats`` (as OFT's loading does). Missing / unexpected keys raise ValueError listing them.
        """
        adapter = unmerged_adapter(directory)
        weights_dir = adapter_base(adapter, base) if adapter is not None else Path(directory)
        own_config = Path(directory) / "config.json"
        config_dict = read_config_dict(directory if own_config.is_file() else weights_dir)
        base_config, saved_dtype = load_config(weights_dir)
        settings = infer_settings(directory, config_dict, oft, base_config.text_config.hidden_size)
        config = oft_config_from(base_config, settings)
        stats = read_statistics(directory)
        if stats is not None:
            config.norm_stats = stats
        dtype = torch_dtype or saved_dtype
        with parameters_on_meta():
            model = cls(config)
        load_weights_(model.weights_module(), weights_dir, dtype, device or "cpu")
        if adapter is not None:
            merge_adapter_(model.weights_module(), adapter)
        load_components_(model, directory, dtype, device or "cpu")
        model.remote_code_dir = str(directory) if auto_maps(directory) else None
        return model.to(device=device).eval()


def predict_chunk(vla: NativeOpenVLAOFT, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """``vla.predict_chunk(batch)`` (:meth:`NativeOpenVLAOFT.predict_chunk`; through a PEFT wrapper too)."""
    return vla.predict_chunk(batch)


def oft_config_from(config: NativeOpenVLAConfig, oft: dict[str, Any] | OFTSettings | None) -> NativeOpenVLAOFTConfig:
    """An OpenVLA config with OFT's settings added (derived and bookkeeping fields dropped, as ``load_config``)."""
    data = copy.deepcopy(config.to_dict())
    for key in ("model_type", "torch_dtype", "dtype", "transformers_version", "auto_map", "_name_or_path", "oft"):
        data.pop(key, None)
    return NativeOpenVLAOFTConfig(oft=oft, **data)
