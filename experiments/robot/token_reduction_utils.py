"""Token reduction for OpenVLA policies: the public API that robot code imports.

    from experiments.robot.token_reduction_utils import apply_token_reduction_to_vla
    vla = apply_token_reduction_to_vla(vla, reduction_ratio=0.25)   # the measured default method ("diverse_merge")
    vla = apply_token_reduction_spec(vla, "vision:diverse_merge:0.1@0.25")  # the same settings in the one spec grammar
    action = vla.predict_action(**inputs, unnorm_key="bridge_orig", do_sample=False)

Everything here is a re-export of :mod:`prismatic_tr`; see its modules for the details.
"""

from __future__ import annotations

from typing import Any

from prismatic_tr.reducers import ReducerConfig, TokenReducer, available_methods
from prismatic_tr.vla import (
    ReductionHandle,
    Setting,
    TokenReductionSettings,
    apply_50_percent_topk_reduction,
    apply_token_reduction_from_config,
    apply_token_reduction_spec,
    apply_token_reduction_to_vla,
    get_token_reduction,
    monkey_patch_vision_backbone_with_reduction,
    reduction_call,
    remove_token_reduction,
    visual_token_count,
)


def benchmark_token_reduction(vla: Any, sample_inputs: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """Time and compare a whole policy step per method x ratio; see
    :func:`prismatic_tr.bench.vla.benchmark.benchmark_token_reduction`."""
    from prismatic_tr.bench.vla.benchmark import benchmark_token_reduction as _benchmark

    return _benchmark(vla, sample_inputs, **kwargs)


__all__ = [
    "ReducerConfig",
    "ReductionHandle",
    "Setting",
    "TokenReducer",
    "TokenReductionSettings",
    "apply_50_percent_topk_reduction",
    "apply_token_reduction_from_config",
    "apply_token_reduction_spec",
    "apply_token_reduction_to_vla",
    "available_methods",
    "benchmark_token_reduction",
    "get_token_reduction",
    "monkey_patch_vision_backbone_with_reduction",
    "reduction_call",
    "remove_token_reduction",
    "visual_token_count",
]
