"""The reduction settings a user picks for a VLA, and their round trip through ``vla.config``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from prismatic_tr.reducers import ReducerConfig

CONFIG_KEY = "token_reduction"


@dataclass
class TokenReductionSettings:
    """What ``apply_token_reduction_to_vla`` was asked for; stored as ``vla.config.token_reduction``.

    keep_cls_token: protect prefix tokens (CLS, registers) if the backbone emits them. OpenVLA's
        backbones return patch tokens only, so this matters only for custom backbones.
    """

    method: str = "topk_magnitude"
    reduction_ratio: float = 0.5
    spatial_merge_size: int = 2
    keep_cls_token: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.keep_cls_token, bool):
            raise ValueError(f"keep_cls_token={self.keep_cls_token!r} is not allowed; use True or False")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed={self.seed!r} is not allowed; use an integer")
        self.reducer_config()  # validates method, ratio and merge size now, not mid-forward

    def reducer_config(
        self, num_prefix_tokens: int = 0, grid_size: tuple[int, int] | None = None
    ) -> ReducerConfig:
        return ReducerConfig(
            method=self.method,
            reduction_ratio=self.reduction_ratio,
            spatial_merge_size=self.spatial_merge_size,
            num_prefix_tokens=num_prefix_tokens,
            grid_size=grid_size,
            seed=self.seed,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenReductionSettings:
        """Settings from a stored dict; ``ValueError`` naming unknown keys."""
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown token_reduction keys {unknown}; allowed: {sorted(cls.__dataclass_fields__)}")
        return cls(**data)


def read_settings(config: Any) -> TokenReductionSettings | None:
    """Settings stored on a model config (``config.token_reduction``), or None when there are none."""
    data = getattr(config, CONFIG_KEY, None) if config is not None else None
    if not data:
        return None
    if isinstance(data, TokenReductionSettings):
        return data
    if not isinstance(data, dict):
        raise ValueError(f"config.{CONFIG_KEY} must be a dict of settings, got {type(data).__name__}")
    return TokenReductionSettings.from_dict(dict(data))
