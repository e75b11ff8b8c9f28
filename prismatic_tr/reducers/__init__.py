"""Pure tensor token reduction ``(B, N, D) -> (B, K, D)``; knows nothing about any model.

Strategies (registered by name): ``topk_magnitude``, ``spatial_pool``, ``attention_score``, ``random`` (the seed
design's), ``saliency`` (least like the mean token), ``diverse`` and ``salient_diverse`` (max-min cover).
"""

from prismatic_tr.reducers import strategies  # noqa: F401  (registers the built-in strategies)
from prismatic_tr.reducers.config import ReducerConfig, ReductionOutput, infer_grid, num_kept
from prismatic_tr.reducers.registry import (
    Strategy,
    available_methods,
    get_strategy,
    register_strategy,
    selection_methods,
)
from prismatic_tr.reducers.token_reducer import TokenReducer

__all__ = [
    "ReducerConfig",
    "ReductionOutput",
    "Strategy",
    "TokenReducer",
    "available_methods",
    "get_strategy",
    "infer_grid",
    "num_kept",
    "register_strategy",
    "selection_methods",
]
