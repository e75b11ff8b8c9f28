"""``ReferenceOpenVLA``: an OpenVLA-architecture model (timm vision backbone -> MLP projector -> Llama).

Random weights; behaves like the Hugging Face OpenVLA model (``OpenVLAForActionPrediction``) for everything
token reduction touches: attributes ``vision_backbone`` / ``projector`` / ``language_model``, a ``forward``
that puts the projected patches right after BOS and sizes masks and labels from the actual number of projected
tokens, ``generate`` that consumes the image, and ``predict_action`` with OpenVLA's bins and un-normalisation.
A plain ``nn.Module`` (not a ``PreTrainedModel``) with its own ``save_pretrained`` / ``from_pretrained``
(config.json + model.safetensors), so it behaves the same on transformers 4.40 and 5.x.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import ModelOutput

from .action_tokenizer import ActionTokenizer
from .config import ReferenceOpenVLAConfig
from .inference import OpenVLAInferenceMixin
from .init_utils import parameters_on_meta
from .vision import ReferenceProjector, ReferenceVisionBackbone

CONFIG_NAME, WEIGHTS_NAME = "config.json", "model.safetensors"
DTYPE_KEY = "prismatic_tr_weights_dtype"


@dataclass
class PrismaticCausalLMOutput(ModelOutput):
    """Output of :meth:`ReferenceOpenVLA.forward`; ``projector_features`` is (B, K, llm_dim) or None."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    past_key_values: Any = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    projector_features: torch.Tensor | None = None


def build_language_model(text_config: LlamaConfig, attn_implementation: str) -> LlamaForCausalLM:
    """A randomly initialised ``LlamaForCausalLM`` with the given attention implementation."""
    cfg = LlamaConfig(**{k: v for k, v in text_config.to_dict().items() if k != "model_type"})
    cfg._attn_implementation = attn_implementation
    return LlamaForCausalLM(cfg)


class ReferenceOpenVLA(OpenVLAInferenceMixin, nn.Module):
    """OpenVLA-architecture VLA. See the module docstring; shapes are given on each method."""

    def __init__(self, config: ReferenceOpenVLAConfig) -> None:
        super().__init__()
        self.config = config
        self.vision_backbone = ReferenceVisionBackbone(
            config.timm_model_ids, config.image_sizes, config.vision_specs
        )
        self.projector = ReferenceProjector(
            config.use_fused_vision_backbone, self.vision_backbone.embed_dim, config.text_config.hidden_size
        )
        self.language_model = build_language_model(config.text_config, config.attn_implementation_llm)
        self.vocab_size = config.text_vocab_size  # unpadded, as OpenVLA's OpenVLAForActionPrediction
        self.pad_token_id = config.text_config.pad_token_id
        self.norm_stats: dict[str, Any] = config.norm_stats or {}
        self.action_tokenizer = ActionTokenizer(self.vocab_size, n_bins=config.n_action_bins)
        self.bins, self.bin_centers = self.action_tokenizer.bins, self.action_tokenizer.bin_centers
        self.empty_token_id: int | None = None  # OpenVLA appends Llama's 29871; this tokenizer has none

    # --- HF-style conveniences (PEFT, training code) ---
    @property
    def device(self) -> torch.device:
        return self.language_model.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.language_model.lm_head.weight.dtype

    def get_input_embeddings(self) -> nn.Module:
        return self.language_model.get_input_embeddings()

    def get_output_embeddings(self) -> nn.Module:
        return self.language_model.get_output_embeddings()

    def gradient_checkpointing_enable(self, **kwargs: Any) -> None:
        """Gradient checkpointing in the language model (the vision backbone is usually frozen)."""
        self.language_model.gradient_checkpointing_enable(**kwargs)

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        past_key_values: Any = None,
        use_cache: bool | None = None,
        position_ids: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        output_projector_features: bool | None = None,
        return_dict: bool | None = None,
    ) -> PrismaticCausalLMOutput:
        """Multimodal forward (pixel_values given, no cache) or text-only / cached forward otherwise.

        Returns logits (B, L + K, V_padded) for a multimodal call; ``output_projector_features`` and
        ``return_dict`` are accepted for HF-compatibility (projector features are always returned).
        """
        projected = None
        if pixel_values is not None and past_key_values is None:
            if input_ids is None or inputs_embeds is not None:
                raise ValueError(
                    "a multimodal forward needs input_ids (and no inputs_embeds) with pixel_values"
                )
            projected = self.embed_images(pixel_values)
            inputs_embeds, attention_mask, labels = self.build_multimodal_inputs(
                input_ids, attention_mask, projected, labels
            )
            input_ids = None
        extra = {"output_hidden_states": output_hidden_states, "output_attentions": output_attentions}
        out = self.language_model(
            input_ids=input_ids,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            labels=labels,
            use_cache=use_cache,
            **{k: v for k, v in extra.items() if v is not None},
        )
        return PrismaticCausalLMOutput(
            loss=out.loss,
            logits=out.logits,
            past_key_values=out.past_key_values,
            hidden_states=getattr(out, "hidden_states", None),
            attentions=getattr(out, "attentions", None),
            projector_features=projected,
        )

    # --- persistence ---
    def save_pretrained(self, save_directory: str | os.PathLike, **_: Any) -> None:
        """Write config.json (with norm_stats, token_reduction, dtype) and model.safetensors."""
        os.makedirs(save_directory, exist_ok=True)
        cfg = self.config.to_dict()
        cfg["norm_stats"], cfg[DTYPE_KEY] = self.norm_stats, str(self.dtype).replace("torch.", "")
        with open(os.path.join(save_directory, CONFIG_NAME), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
        tensors = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        save_file(tensors, os.path.join(save_directory, WEIGHTS_NAME), metadata={"format": "pt"})

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike,
        torch_dtype: torch.dtype | None = None,
        device: str | torch.device | None = None,
        **_: Any,
    ) -> ReferenceOpenVLA:
        """Load a directory written by :meth:`save_pretrained`; dtype defaults to the saved one."""
        config, saved_dtype = load_config(directory)
        with parameters_on_meta():
            model = cls(config)
        state = load_file(os.path.join(directory, WEIGHTS_NAME))
        model.load_state_dict(state, strict=True, assign=True)
        return model.to(device=device, dtype=torch_dtype or saved_dtype).eval()


def load_config(directory: str | os.PathLike) -> tuple[ReferenceOpenVLAConfig, torch.dtype]:
    """Read config.json of a reference checkpoint -> (config, dtype of the saved weights).

    Raises FileNotFoundError without config.json, ValueError if it describes another model type.
    """
    path = os.path.join(directory, CONFIG_NAME)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No {CONFIG_NAME} in {str(directory)!r}")
    with open(path) as f:
        data = json.load(f)
    if data.get("model_type") != ReferenceOpenVLAConfig.model_type:
        raise ValueError(
            f"{path!r} has model_type {data.get('model_type')!r}; expected {ReferenceOpenVLAConfig.model_type!r}"
        )
    data.pop("model_type", None)
    saved = getattr(torch, str(data.pop(DTYPE_KEY, "float32")), None)
    return ReferenceOpenVLAConfig(**data), (saved if isinstance(saved, torch.dtype) else torch.float32)
