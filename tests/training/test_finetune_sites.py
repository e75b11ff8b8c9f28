"""Training with a reduction attached, below the fine-tuning script: the training forward keeps the kept tokens'
unreduced positions (as inference does), the loss reaches the towers through the vision site's cut (also with
gradient checkpointing), and OpenVLA's own fine-tuning slice lines up once it counts the reduced tokens. The
script itself (config, checkpoints, the llm site refused) is tested in ``test_finetune.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers.positions import expected_ids, handbuilt_logits, sharpen_attention
from helpers.reference_clients import import_openvla_hf, tiny_timm_towers
from helpers.reference_models import build_reference_vla

from prismatic_tr.models import build_vla
from prismatic_tr.reducers import num_kept
from prismatic_tr.vit.shared import reduction_block
from prismatic_tr.vla import (
    apply_token_reduction_from_config,
    apply_token_reduction_to_vla,
    get_token_reduction,
    reduction_call,
    remove_token_reduction,
    unwrap_vla,
    visual_token_count,
)

N_PATCHES = 256  # tiny preset: 224 px, patch 14
# a selecting method: the hand-built reference runs the kept tokens alone (a merging one, the default, also weighs
# each kept token by its group in the attention: tests/llm/test_sizes.py)
VISION = {"site": "vision", "method": "diverse", "depth_fraction": 0.5, "reduction_ratio": 0.25}


def tiny_batch(batch: int = 2, text: int = 6, pad: int = 2, seed: int = 0) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask / labels (B, text) with ``pad`` right-padded positions in row 0; pixels (B, 6, 224, 224)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 1000, (batch, text), generator=g)
    ids[:, 0] = 1  # BOS
    mask = torch.ones_like(ids)
    mask[0, text - pad:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    px = torch.randn(batch, 6, 224, 224, generator=g)
    return {"input_ids": ids, "attention_mask": mask, "pixel_values": px, "labels": labels}


def trained_forward(vla: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, logits, projector features) of a training-mode forward with labels; gradients enabled."""
    vla.train()
    out = vla(**batch)
    return out.loss, out.logits, out.projector_features


# --- the training forward is position-true ------------------------------------------------------------------

@pytest.mark.parametrize("setting", [VISION, {"site": "projector", "method": "topk_magnitude", "reduction_ratio": 0.25}])
def test_training_forward_keeps_original_positions(setting):
    """A forward with labels in train mode gives the logits of the language model run by hand on
    [BOS, kept tokens, text] at the kept tokens' unreduced positions (as inference does), not at compact ones."""
    vla = build_vla("tiny", seed=0)
    sharpen_attention(vla.language_model)
    apply_token_reduction_to_vla(vla, **setting)
    batch = tiny_batch()
    with torch.no_grad(), reduction_call(vla) as call:
        _, logits, projected = trained_forward(vla, batch)
    kept = call.kept
    k = num_kept(N_PATCHES, setting["reduction_ratio"])
    assert projected.shape[1] == k and kept.shape == (2, k)
    remove_token_reduction(vla)
    text = batch["input_ids"].shape[1] - 1
    lm, embed = vla.language_model, vla.language_model.get_input_embeddings()
    args = (lm, embed, batch["input_ids"], projected)
    original = handbuilt_logits(*args, expected_ids(kept, N_PATCHES, k, text), key_mask=batch["attention_mask"])
    compact = handbuilt_logits(*args, expected_ids(kept, N_PATCHES, k, text, compact=True),
                               key_mask=batch["attention_mask"])
    torch.testing.assert_close(logits, original, atol=1e-5, rtol=1e-5)
    assert (logits[1] - compact[1]).abs().max() > 1e-3  # the positions matter on this model


# --- gradients reach the towers through the cut -----------------------------------------------------------------

def _tower_grads(vla: torch.nn.Module) -> dict[tuple[int, int], float]:
    """{(tower, block): summed |grad| of that block's parameters}."""
    towers = [vla.vision_backbone.featurizer, vla.vision_backbone.fused_featurizer]
    return {(t, j): sum(float(p.grad.abs().sum()) for p in block.parameters() if p.grad is not None)
            for t, tower in enumerate(towers) for j, block in enumerate(tower.blocks)}


def test_loss_has_gradient_through_the_vision_cut():
    """Every block each tower runs, before and after the cut, gets a gradient from the action loss."""
    vla = build_vla("tiny", seed=0)
    apply_token_reduction_to_vla(vla, **VISION)
    loss, _, _ = trained_forward(vla, tiny_batch())
    loss.backward()
    grads = _tower_grads(vla)
    towers = [vla.vision_backbone.featurizer, vla.vision_backbone.fused_featurizer]
    for t, tower in enumerate(towers):
        cut = reduction_block(len(tower.blocks), VISION["depth_fraction"])
        runs = len(tower.blocks) - 1  # OpenVLA's towers stop before their last block
        assert cut + 1 < runs, "the cut must leave blocks after it on this model"
        assert all(grads[(t, j)] > 0 for j in range(runs)), (t, cut, grads)


def test_llm_gradient_checkpointing_gives_the_same_gradients():
    """Gradient checkpointing in the language model (its layers, and on transformers 4.40 their rotary calls, run
    again in the backward pass) with the vision site attached: the same loss and gradients as without.
    (The towers cannot be checkpointed: OpenVLA's and the native towers run their blocks in a plain loop.)"""
    results = []
    for checkpointing in (False, True):
        vla = build_vla("tiny", seed=0)
        sharpen_attention(vla.language_model)
        apply_token_reduction_to_vla(vla, **VISION)
        if checkpointing:
            vla.gradient_checkpointing_enable()
        calls: list[int] = []
        vla.language_model.model.layers[0].mlp.register_forward_pre_hook(lambda *_, c=calls: c.append(1))
        loss, _, _ = trained_forward(vla, tiny_batch())
        loss.backward()
        assert len(calls) == (2 if checkpointing else 1)  # recomputed in the backward pass
        results.append((loss.detach(), _tower_grads(vla), [p.grad.clone() for p in vla.projector.parameters()]))
    (loss0, towers0, proj0), (loss1, towers1, proj1) = results
    torch.testing.assert_close(loss1, loss0)
    torch.testing.assert_close(proj1, proj0)
    assert towers1 == pytest.approx(towers0, rel=1e-5)


# --- OpenVLA's own fine-tuning script: the accuracy slice ---------------------------------------------------

def openvla_with_lora(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(OpenVLA's remote-code model with the vision site attached after loading and LoRA wrapped after it, as the
    README says for OpenVLA's ``finetune.py``; the modeling module). Skips off OpenVLA's pins."""
    pytest.importorskip("peft")
    from peft import LoraConfig, get_peft_model

    modeling = import_openvla_hf("modeling_prismatic")
    vla = build_reference_vla(modeling, import_openvla_hf("configuration_prismatic"), seed=seed)
    apply_token_reduction_to_vla(vla, **VISION)
    lora = LoraConfig(r=4, lora_alpha=4, target_modules="all-linear", init_lora_weights="gaussian")
    return get_peft_model(vla, lora), modeling


def test_openvla_finetune_slice_fix_on_openvla_remote_code():
    """OpenVLA's ``vla-scripts/finetune.py`` reads its action logits at
    ``featurizer.patch_embed.num_patches:-1``. With a reduction attached, slicing at ``visual_token_count(vla)``
    lines them up with ``labels[:, 1:]`` again: the cross-entropy over that slice is the model's own loss; the
    unreduced count does not line up."""
    vla, _ = openvla_with_lora()
    batch = tiny_batch()
    loss, logits, projected = trained_forward(vla, batch)
    k = visual_token_count(vla)
    assert k == num_kept(N_PATCHES, VISION["reduction_ratio"]) == projected.shape[1]
    labels = batch["labels"][:, 1:]
    fixed = logits[:, k:-1]
    torch.testing.assert_close(F.cross_entropy(fixed.transpose(1, 2), labels, ignore_index=-100), loss)
    unreduced = int(unwrap_vla(vla).vision_backbone.featurizer.patch_embed.num_patches)
    assert unreduced == N_PATCHES and logits[:, unreduced:-1].shape[1] != labels.shape[1]


def test_openvla_merge_step_saves_the_setting(tmp_path: Path):
    """OpenVLA's merge step (a fresh base, the saved adapter, ``merge_and_unload``, ``save_pretrained``) with the
    same reduction attached to the fresh base: OpenVLA's class loads the merged checkpoint and
    ``apply_token_reduction_from_config`` gives the trained model's logits."""
    from peft import PeftModel

    vla, modeling = openvla_with_lora()
    with torch.no_grad():  # a trained adapter (LoRA's B starts at zero)
        for name, p in vla.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.05, generator=torch.Generator().manual_seed(1))
    vla.save_pretrained(str(tmp_path / "adapter"))
    base = build_reference_vla(modeling, import_openvla_hf("configuration_prismatic"), seed=0)
    apply_token_reduction_to_vla(base, **VISION)
    PeftModel.from_pretrained(base, str(tmp_path / "adapter")).merge_and_unload().save_pretrained(tmp_path / "merged")
    with tiny_timm_towers():
        loaded = modeling.OpenVLAForActionPrediction.from_pretrained(str(tmp_path / "merged"), torch_dtype=torch.float32)
    handle = apply_token_reduction_from_config(loaded)
    assert handle.settings == get_token_reduction(vla).settings
    batch = tiny_batch()
    with torch.no_grad():
        trained, reloaded = vla.eval()(**batch).logits, loaded.eval()(**batch).logits
    torch.testing.assert_close(reloaded, trained, atol=1e-5, rtol=1e-5)
    remove_token_reduction(loaded)
    with torch.no_grad():  # the setting is what made them equal
        assert (loaded(**batch).logits[:, -1] - trained[:, -1]).abs().max() > 1e-3
