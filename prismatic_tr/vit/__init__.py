"""In-backbone token reduction for timm Vision Transformers: topk (EViT), tome (ToMe), hquota_ff.

    from prismatic_tr.vit import apply_vit_reduction, create_model, tokens_per_location
    handle = apply_vit_reduction(model, "tome", r=8)        # or used as a context manager
    model = create_model("topk_deit_base_patch16_224", keep_ratio=0.7, reduction_loc=[3, 6, 9])
    model.token_reduction_handle.remove()

Algorithms (pure tensors) live in ``topk.py``, ``merging.py`` (Token Merging), ``hquota.py``; ``patch.py``
attaches them.
"""

from prismatic_tr.vit.config import (
    METHODS,
    LayerStep,
    VitReductionConfig,
    default_reduction_loc,
    tokens_per_location,
)
from prismatic_tr.vit.factory import create_model, split_method
from prismatic_tr.vit.patch import HANDLE_ATTR, VitReductionHandle, apply_vit_reduction, get_vit_reduction

__all__ = [
    "HANDLE_ATTR",
    "METHODS",
    "LayerStep",
    "VitReductionConfig",
    "VitReductionHandle",
    "apply_vit_reduction",
    "create_model",
    "default_reduction_loc",
    "get_vit_reduction",
    "split_method",
    "tokens_per_location",
]
