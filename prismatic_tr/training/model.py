"""Building the model to train: load, (quantize), attach token reduction, wrap with LoRA, wrap with DDP."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import torch
from torch import nn

from prismatic_tr.models import load_vla
from prismatic_tr.reducers.learned import LEARNED
from prismatic_tr.training.config import FinetuneConfig, TokenReductionConfig
from prismatic_tr.training.quantization import quantize_linears
from prismatic_tr.vla import (
    attach_token_reduction,
    get_token_reduction,
    read_settings,
    remove_token_reduction,
)

logger = logging.getLogger(__name__)


def load_base(vla_path: str, dtype: torch.dtype, device: str | torch.device = "cpu") -> tuple[nn.Module, Any]:
    """``load_vla`` with every failure turned into a ValueError that names ``vla_path``."""
    try:
        return load_vla(str(vla_path), dtype=dtype, device=device)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"cannot load vla_path={str(vla_path)!r}: {err}") from err


# follows OpenVLA c8f03f48 prismatic/extern/hf/modeling_prismatic.py predict_action (MIT, see NOTICE): the empty token
# 29871 after the prompt.
def prompt_suffix_ids(vla: nn.Module) -> tuple[int, ...]:
    """Token ids that ``predict_action`` appends after the prompt (OpenVLA's empty token 29871 for Llama-2
    checkpoints, none for small vocabularies); training prompts must end the same way."""
    empty = getattr(vla, "empty_token_id", None)
    if empty is None and getattr(getattr(vla, "config", None), "model_type", "") == "openvla" and not hasattr(
            vla, "empty_token_id"):  # OpenVLA's remote-code model: always 29871
        from prismatic_tr.models.backbones import LLAMA2_EMPTY_TOKEN_ID

        empty = LLAMA2_EMPTY_TOKEN_ID
    return (int(empty),) if empty is not None else ()


def set_token_reduction(vla: nn.Module, cfg: TokenReductionConfig) -> None:
    """Attach ``cfg``'s reduction to ``vla`` at its site (settings land in ``vla.config.token_reduction``, so every
    checkpoint carries them), or remove any the checkpoint carried when ``cfg`` is off."""
    settings = cfg.settings()
    if settings is None:
        if get_token_reduction(vla) is not None or getattr(vla.config, "token_reduction", None):
            logger.info("token_reduction is off: dropping the reduction the checkpoint carried")
            remove_token_reduction(vla)
            vla.config.token_reduction = None
        return
    attach_token_reduction(vla, with_carried_scorer(vla, settings))


def with_carried_scorer(vla: nn.Module, settings: Any) -> Any:
    """``settings`` with the learned scorer that ``vla``'s own config carries (a checkpoint fine-tuned under
    ``learned``), so a fine-tune from it starts from the trained scorer, not from zeros; ``settings`` unchanged when
    it is not ``learned``, names a scorer itself, or the checkpoint has none. ValueError when the carried scorer was
    trained at another site or depth (it scores other tokens there)."""
    if settings.method != LEARNED or settings.scorer is not None:
        return settings
    carried = [s for s in read_settings(getattr(vla, "config", None)) if s.scorer is not None]
    if not carried:
        return settings
    own = carried[0]
    if (own.site, own.depth_fraction) != (settings.site, settings.depth_fraction):
        raise ValueError(f"token_reduction site={settings.site!r} depth_fraction={settings.depth_fraction!r}: the "
                         f"checkpoint's learned scorer was trained at site={own.site!r} depth_fraction="
                         f"{own.depth_fraction!r}; fine-tune at that depth to keep training it")
    logger.info("token_reduction: keeping the learned scorer the checkpoint carries (%d values)", len(own.scorer))
    return dataclasses.replace(settings, scorer=list(own.scorer))


def build_teacher(cfg: FinetuneConfig, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """``cfg.vla_path`` loaded again, without any reduction (one it carried is removed), frozen, in eval mode: the
    teacher of :class:`prismatic_tr.training.distill.Distillation`. Quantized like the student when asked."""
    vla, _ = load_base(cfg.vla_path, dtype=dtype, device="cpu")
    if cfg.use_quantization:
        quantize_linears(vla, cfg.quantization_bits, device, compute_dtype=dtype)
    vla.to(device)
    set_token_reduction(vla, TokenReductionConfig())
    for p in vla.parameters():
        p.requires_grad_(False)
    return vla.eval()


def all_linear_names(model: nn.Module) -> list[str]:
    """peft's ``target_modules="all-linear"`` for any nn.Module: every Linear except the output embeddings.

    (peft accepts "all-linear" only for ``PreTrainedModel``; the reference model is a plain module.)
    """
    get_out = getattr(model, "get_output_embeddings", None)
    out_emb = get_out() if callable(get_out) else None
    return [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and m is not out_emb]


# the modules an OpenVLA-OFT model adds to OpenVLA's; OFT's finetune.py trains them whole beside the VLA's LoRA
OFT_HEADS = ("action_head", "proprio_projector")


def oft_heads(vla: nn.Module) -> list[nn.Module]:
    """The OFT heads ``vla`` has (none for an OpenVLA model): trained whole, under LoRA too."""
    return [m for m in (getattr(vla, name, None) for name in OFT_HEADS) if isinstance(m, nn.Module)]


def lora_targets(vla: nn.Module) -> Any:
    """peft's ``target_modules`` for ``vla``: "all-linear" for a ``PreTrainedModel`` (every Linear but the output
    embeddings), the same list by name for a plain module, and for an OFT model the Linears of the towers,
    projector and Llama only (its heads train whole, as OFT's ``finetune.py`` does)."""
    from transformers import PreTrainedModel

    if oft_heads(vla):
        heads = tuple(f"{name}." for name in OFT_HEADS)
        return [n for n in all_linear_names(vla) if not n.startswith(heads)]
    return "all-linear" if isinstance(vla, PreTrainedModel) else all_linear_names(vla)


def add_lora(vla: nn.Module, cfg: FinetuneConfig) -> nn.Module:
    """Wrap ``vla`` with LoRA adapters (rank ``cfg.lora_rank``, alpha min(rank, 16), gaussian init) on
    :func:`lora_targets`."""
    from peft import LoraConfig, get_peft_model

    targets = lora_targets(vla)
    lora_cfg = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        init_lora_weights="gaussian",
    )
    return get_peft_model(vla, lora_cfg)


def build_training_model(
    cfg: FinetuneConfig, device: torch.device, dtype: torch.dtype
) -> tuple[nn.Module, Any, nn.Module]:
    """Load ``cfg.vla_path`` and prepare it for training.

    Returns:
        (model to train: PeftModel or the VLA itself, processor, the underlying VLA).
    Order: load on the CPU -> quantize (optional) -> move to ``device`` -> token reduction -> LoRA (an OFT model's
    heads stay trainable) -> freeze the towers (``cfg.freeze_vision_backbone``: no gradient reaches them, so their backward pass is skipped too).
    """
    vla, processor = load_base(cfg.vla_path, dtype=dtype, device="cpu")
    if oft_heads(vla) and cfg.use_quantization:
        raise ValueError(f"use_quantization=True is not built for OpenVLA-OFT policies (vla_path={str(cfg.vla_path)!r}"
                         "); fine-tune it with LoRA or fully without quantization")
    if cfg.use_quantization:
        names = quantize_linears(vla, cfg.quantization_bits, device, compute_dtype=dtype)
        logger.info("quantized %d Linear layers to %d bit", len(names), cfg.quantization_bits)
        for p in vla.parameters():
            p.requires_grad_(False)
    vla.to(device)
    set_token_reduction(vla, cfg.token_reduction)
    model = add_lora(vla, cfg) if cfg.use_lora else vla
    if not cfg.use_lora:
        for p in vla.parameters():
            p.requires_grad_(True)
    for head in oft_heads(vla):
        head.requires_grad_(True)
    if cfg.freeze_vision_backbone:
        for p in vla.vision_backbone.parameters():
            p.requires_grad_(False)
    model.train()
    return model, processor, vla


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def wrap_ddp(model: nn.Module, device: torch.device, world_size: int) -> nn.Module:
    """DDP wrapper when ``world_size > 1`` (unused parameters allowed: e.g. SigLIP's unused pooling head)."""
    if world_size <= 1:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [device.index] if device.type == "cuda" else None
    return DDP(model, device_ids=ids, find_unused_parameters=True, gradient_as_bucket_view=True)
