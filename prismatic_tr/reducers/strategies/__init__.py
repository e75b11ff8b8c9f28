"""Built-in strategies; importing this package registers them."""

from prismatic_tr.reducers.strategies import attention_score, random_select, spatial_pool, topk_magnitude

__all__ = ["attention_score", "random_select", "spatial_pool", "topk_magnitude"]
