"""Run a baseline and a reduced model over the same data and compute every fidelity metric."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn

from prismatic_tr.eval.metrics import kl_divergence, linear_cka, margin_change, top1_accuracy, top1_agreement

__all__ = ["ModelOutputs", "collect_outputs", "evaluate_fidelity", "fidelity_from_outputs"]


@dataclass
class ModelOutputs:
    """Outputs of one model over a dataset, on the CPU.

    logits (N, C); features (N, D) = pre-logit features (the logits for models without a timm head);
    labels (N,) long, or None when the loader gives none.
    """

    logits: torch.Tensor
    features: torch.Tensor
    labels: torch.Tensor | None


def _split_batch(batch: object) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(batch, torch.Tensor):
        return batch, None
    if isinstance(batch, (tuple, list)) and len(batch) >= 1 and isinstance(batch[0], torch.Tensor):
        labels = batch[1] if len(batch) > 1 and isinstance(batch[1], torch.Tensor) else None
        return batch[0], labels
    raise ValueError(f"loader must yield tensors or (images, labels) pairs, got {type(batch).__name__}")


def _forward(model: nn.Module, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """images (B, 3, H, W) -> logits (B, C), features (B, D). Uses timm's feature/head split when present."""
    has_head = all(hasattr(model, a) for a in ("forward_features", "forward_head", "get_classifier"))
    if not has_head:
        logits = model(images)
        return logits, logits
    features = model.forward_head(model.forward_features(images), pre_logits=True)
    return model.get_classifier()(features), features


@torch.no_grad()
def collect_outputs(
    model: nn.Module, loader: Iterable[object], device: str | torch.device = "cpu", progress: bool = False
) -> ModelOutputs:
    """Evaluate ``model`` (put in eval mode) on every batch of ``loader``; results gathered on the CPU."""
    model.eval()
    logits, feats, labels = [], [], []
    batches = loader
    if progress:
        from tqdm.auto import tqdm

        batches = tqdm(loader, desc="batches", leave=False)
    for batch in batches:
        images, batch_labels = _split_batch(batch)
        out, feat = _forward(model, images.to(device))
        logits.append(out.float().cpu())
        feats.append(feat.float().cpu())
        if batch_labels is not None:
            labels.append(batch_labels.cpu())
    if not logits:
        raise ValueError("loader yielded no batches; need at least one")
    all_labels = torch.cat(labels) if labels and len(labels) == len(logits) else None
    return ModelOutputs(torch.cat(logits), torch.cat(feats), all_labels)


def fidelity_from_outputs(base: ModelOutputs, reduced: ModelOutputs) -> dict[str, float]:
    """All metrics of ``reduced`` against ``base``: agreement, KL(B || M), margin change, CKA, accuracies."""
    result = {
        "top1_agreement": top1_agreement(base.logits, reduced.logits),
        "kl_divergence": kl_divergence(base.logits, reduced.logits),
        "margin_change": margin_change(base.logits, reduced.logits),
        "linear_cka": linear_cka(base.features, reduced.features) if base.features.shape[0] > 1 else float("nan"),
        "num_samples": float(base.logits.shape[0]),
    }
    if base.labels is not None:
        result["top1_accuracy_baseline"] = top1_accuracy(base.logits, base.labels)
        result["top1_accuracy"] = top1_accuracy(reduced.logits, base.labels)
    return result


def evaluate_fidelity(
    baseline: nn.Module, reduced: nn.Module, loader: Iterable[object], device: str | torch.device = "cpu"
) -> dict[str, float]:
    """Run both models over ``loader`` (iterated twice, so it must be re-iterable) and compare them.

    Returns a dict with ``top1_agreement``, ``kl_divergence``, ``margin_change``, ``linear_cka``,
    ``num_samples`` and, when the loader yields labels, ``top1_accuracy`` / ``top1_accuracy_baseline``.
    """
    base = collect_outputs(baseline, loader, device)
    red = collect_outputs(reduced, loader, device)
    return fidelity_from_outputs(base, red)
