"""``NativeOpenVLA``: OpenVLA (timm vision towers -> MLP projector -> Llama) without OpenVLA's remote code.

Same modules and parameter names as OpenVLA's ``OpenVLAForActionPrediction`` (``vision_backbone``,
``projector``, ``language_model`` a transformers ``LlamaForCausalLM``), the same ``forward`` layout (projected
patches right after BOS; masks and labels sized from the actual number of projected tokens), and OpenVLA's
``predict_action`` (empty-token rule, greedy action tokens, bin centres, q01/q99 un-normalisation with the
mask). It reads and writes OpenVLA's checkpoint layout (``config.json`` + safetensors, see
:mod:`prismatic_tr.models.checkpoint`) on transformers 4.40 and 5.x alike: a plain ``nn.Module``, not a
``PreTrainedModel``, so nothing of transformers' loading machinery is involved.
"""

from __future__ import annotations

import json
import os
from dataclasses import field, make_dataclass
from typing import Any

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import ModelOutput

from .action_tokenizer import ActionTokenizer
from .checkpoint import DEFAULT_MAX_SHARD_BYTES, auto_maps, carry_remote_code, load_weights_, save_weights
from .config import MODEL_TYPE, NativeOpenVLAConfig
from .generation import CACHE_NAME
from .inference import OpenVLAInferenceMixin
from .init_utils import parameters_on_meta
from .vision import NativeProjector, NativeVisionBackbone

CONFIG_NAME = "config.json"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# Output of :meth:`NativeOpenVLA.forward`: loss, logits, the KV cache (field ``CACHE_NAME``: ``cache`` from
# transformers 5.24 on, where ``.past_key_values`` still reads it, else ``past_key_values``), hidden_states,
# attentions, and projector_features (B, K, llm_dim) or None. Built with make_dataclass because the cache
# field's name depends on the installed transformers.
PrismaticCausalLMOutput = make_dataclass(
    "PrismaticCausalLMOutput",
    [(name, Any, field(default=None)) for name in
     ("loss", "logits", CACHE_NAME, "hidden_states", "attentions", "projector_features")],
    bases=(ModelOutput,),
    namespace={"__doc__": "Output of NativeOpenVLA.forward; projector_features is (B, K, llm_dim) or None.",
               "__module__": __name__},
)


def build_language_model(text_config: LlamaConfig, attn_implementation: str) -> LlamaForCausalLM:
    """A randomly initialised ``LlamaForCausalLM`` with the given attention implementation."""
    cfg = LlamaConfig(**{k: v for k, v in text_config.to_dict().items() if k != "model_type"})
    cfg._attn_implementation = attn_implementation
    return LlamaForCausalLM(cfg)


# follows OpenVLA c8f03f48 prismatic/extern/hf/modeling_prismatic.py OpenVLAForActionPrediction (MIT, see NOTICE):
# module and parameter names, forward layout and predict_action, so OpenVLA checkpoints load and act alike.
class NativeOpenVLA(OpenVLAInferenceMixin, nn.Module):
    """OpenVLA, natively. See the module docstring; shapes are given on each method."""

    # The backbone class built in __init__ (OpenVLA-OFT's model builds a multi-image one, models/oft.py).
    vision_backbone_class: type[NativeVisionBackbone] = NativeVisionBackbone

    def __init__(self, config: NativeOpenVLAConfig) -> None:
        super().__init__()
        self.config = config
        self.vision_backbone = self.vision_backbone_class(
            config.timm_model_ids, config.image_sizes, config.timm_override_act_layers, config.timm_model_kwargs
        )
        self.projector = NativeProjector(
            config.use_fused_vision_backbone, self.vision_backbone.embed_dim, config.text_config.hidden_size
        )
        self.language_model = build_language_model(config.text_config, config.attn_implementation_llm)
        self.vocab_size = config.text_vocab_size  # unpadded, as OpenVLA's OpenVLAForActionPrediction
        self.pad_token_id = config.text_config.pad_token_id
        self.norm_stats: dict[str, Any] = config.norm_stats or {}
        self.empty_token_id: int | None = config.empty_token_id
        self.action_tokenizer = ActionTokenizer(self.vocab_size, n_bins=config.n_action_bins)
        self.bins, self.bin_centers = self.action_tokenizer.bins, self.action_tokenizer.bin_centers
        # The checkpoint directory this model was loaded from, when that one carried remote code (see save_pretrained).
        self.remote_code_dir: str | None = None

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
                raise ValueError("a multimodal forward needs input_ids (and no inputs_embeds) with pixel_values")
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
            labels=labels,
            use_cache=use_cache,
            **{CACHE_NAME: past_key_values},
            **{k: v for k, v in extra.items() if v is not None},
        )
        return PrismaticCausalLMOutput(
            loss=out.loss,
            logits=out.logits,
            **{CACHE_NAME: getattr(out, CACHE_NAME)},
            hidden_states=getattr(out, "hidden_states", None),
            attentions=getattr(out, "attentions", None),
            projector_features=projected,
        )

    # --- persistence (OpenVLA's layout) ---
    def weights_module(self) -> nn.Module:
        """The module whose ``state_dict`` is the checkpoint's safetensors (OpenVLA-OFT's model keeps its heads apart)."""
        return self

    def save_pretrained(
        self, save_directory: str | os.PathLike, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
        remote_code_from: str | os.PathLike | None = None, **_: Any,
    ) -> None:
        """Write ``config.json`` (OpenVLA's fields with norm_stats, token_reduction, torch_dtype) and the weights
        under OpenVLA's key names (sharded above ``max_shard_bytes``): what OpenVLA's ``OpenVLAForActionPrediction``
        reads. The processor's files come from ``processor.save_pretrained(save_directory)``.

        Remote code, through :func:`~prismatic_tr.models.checkpoint.carry_remote_code`: ``remote_code_from`` (default:
        ``self.remote_code_dir``, the checkpoint this model was loaded from when that one had remote code) gives the
        directory its ``*.py`` files and ``auto_map``, so that on OpenVLA's pins ``AutoModelForVision2Seq`` (and
        ``AutoProcessor``, once the processor is saved there: a processor loaded from that checkpoint keeps its
        auto_map) load it with ``trust_remote_code=True``. Without remote code, ``README.md`` there says that
        :func:`~prismatic_tr.models.load_vla` loads it.
        """
        os.makedirs(save_directory, exist_ok=True)
        cfg = self.config.to_dict()
        cfg["norm_stats"] = self.norm_stats
        cfg["torch_dtype"] = str(self.dtype).replace("torch.", "")
        for key in ("auto_map", "dtype", "_name_or_path"):  # carry_remote_code writes auto_map when code goes along
            cfg.pop(key, None)
        with open(os.path.join(save_directory, CONFIG_NAME), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
        save_weights(self.weights_module(), save_directory, max_shard_bytes)
        carry_remote_code(remote_code_from or self.remote_code_dir, save_directory)

    @classmethod
    def from_pretrained(
        cls,
        directory: str | os.PathLike,
        torch_dtype: torch.dtype | None = None,
        device: str | torch.device | None = None,
        **_: Any,
    ) -> NativeOpenVLA:
        """Load an OpenVLA checkpoint directory; dtype defaults to the checkpoint's ``torch_dtype``.

        The model is built on the meta device and filled tensor by tensor from the safetensors files
        (no second copy in memory). Missing / unexpected keys raise ValueError listing them.
        """
        config, saved_dtype = load_config(directory)
        dtype = torch_dtype or saved_dtype
        with parameters_on_meta():
            model = cls(config)
        load_weights_(model.weights_module(), directory, dtype, device or "cpu")
        model.remote_code_dir = str(directory) if auto_maps(directory) else None
        return model.to(device=device).eval()


def read_config_dict(directory: str | os.PathLike) -> dict[str, Any]:
    """``config.json`` of a checkpoint directory as a dict; ValueError when there is none."""
    path = os.path.join(directory, CONFIG_NAME)
    if not os.path.isfile(path):
        raise ValueError(f"no {CONFIG_NAME} in {str(directory)!r}; it is not a model checkpoint directory")
    with open(path) as f:
        return json.load(f)


def load_config(directory: str | os.PathLike) -> tuple[NativeOpenVLAConfig, torch.dtype]:
    """Read an OpenVLA ``config.json`` -> (config, dtype of the saved weights, float32 if unstated).

    Raises ValueError for another model type or settings the native model cannot build.
    """
    data = read_config_dict(directory)
    if data.get("model_type") != MODEL_TYPE:
        raise ValueError(f"{os.path.join(directory, CONFIG_NAME)!r} has model_type {data.get('model_type')!r}; "
                         f"the native model loads {MODEL_TYPE!r} checkpoints")
    data.pop("model_type", None)
    saved = str(data.pop("torch_dtype", None) or data.pop("dtype", None) or "float32").replace("torch.", "")
    data.pop("dtype", None)
    for key in ("transformers_version", "auto_map", "_name_or_path"):
        data.pop(key, None)
    return NativeOpenVLAConfig(**data), DTYPES.get(saved, torch.float32)


# v0.1 name
ReferenceOpenVLA = NativeOpenVLA
