"""EViT-style TopK token selection: keep the patch tokens the class token attends to most.

Pure tensor code (no model access). Score of patch token j = attention it receives from one query row,
averaged over heads: softmax(scale * q_row . k_j). The query row is the CLS token (row 0) when the model
has prefix tokens. For models without any prefix token (SigLIP) there is no CLS row, so the row is the
*mean query* over all tokens: ``softmax(scale * mean_i(q_i) . k_j)``, a one-row, O(N) proxy for the mean
attention each token receives from all queries (exact when the logits vary little across queries).
Either way the N x N attention matrix is never built, so fused attention stays on for the block itself.
"""

from __future__ import annotations

import torch

from prismatic_tr.reducers.tensor_ops import gather_tokens, top_indices_after_prefix

__all__ = ["query_row_scores", "topk_keep"]


# follows EViT (Liang et al., ICLR 2022; see NOTICE): score = attention from the CLS row averaged over heads,
# written from the paper; no EViT code is included.
def query_row_scores(q: torch.Tensor, k: torch.Tensor, scale: float, num_prefix: int) -> torch.Tensor:
    """q, k (B, H, N, d) -> importance of each patch token (B, N - num_prefix), head-averaged attention.

    Uses query row 0 (CLS) when ``num_prefix > 0``, else the mean query over all N tokens.
    """
    b, h, n, d = k.shape
    row = (q[:, :, :1] if num_prefix > 0 else q.mean(dim=2, keepdim=True)).reshape(b * h, 1, d)
    keys_t = k.transpose(-2, -1).reshape(b * h, d, n)  # a view at batch 1; one copy of K otherwise
    # baddbmm with beta=0 ignores its first argument (any broadcastable view) and folds the scale into the
    # matmul: one kernel instead of a separate multiply.
    logits = torch.baddbmm(row[..., :1], row, keys_t, beta=0.0, alpha=scale)  # (B*H, 1, N)
    attn = logits.softmax(dim=-1).reshape(b, h, n)
    return attn.mean(dim=1)[:, num_prefix:]


def topk_keep(x: torch.Tensor, scores: torch.Tensor, num_keep: int, num_prefix: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the prefix and the ``num_keep`` best-scored patch tokens, in their original order.

    x (B, N, C), scores (B, N - P) -> tokens (B, P + num_keep, C) and their positions in x (B, P + num_keep),
    ascending (the prefix's 0 .. P - 1 first). Four kernels (pad, topk, sort, gather); static shapes; no host syncs.
    """
    positions = top_indices_after_prefix(scores, num_keep, num_prefix)
    return gather_tokens(x, positions), positions
