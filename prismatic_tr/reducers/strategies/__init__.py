"""Built-in strategies; importing this package registers them."""

from prismatic_tr.reducers.strategies import (
    attention_score,
    diverse,
    diverse_merge,
    pair_merge,
    random_select,
    saliency,
    spatial_pool,
    topk_magnitude,
)

__all__ = ["attention_score", "diverse", "diverse_merge", "pair_merge", "random_select", "saliency", "spatial_pool", "topk_magnitude"]
