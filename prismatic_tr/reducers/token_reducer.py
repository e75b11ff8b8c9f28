"""``TokenReducer``: the parameter-free module that sits between a vision backbone and its projector."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from prismatic_tr.reducers.config import ReducerConfig, ReductionOutput
from prismatic_tr.reducers.random_stream import KeyStream
from prismatic_tr.reducers.registry import Strategy, get_strategy
from prismatic_tr.reducers.tensor_ops import gather_rows, top_indices


class TokenReducer(nn.Module):
    """Reduce visual tokens ``(B, P + N, D) -> (B, P + K, D)`` with a registered strategy.

    The first ``P = cfg.num_prefix_tokens`` tokens (CLS, registers) pass through untouched and stay first.
    K depends only on N and the config, so the output shape is static; the forward path has no host
    syncs, preserves dtype and device, and compiles with ``torch.compile(fullgraph=True)`` for every
    built-in strategy (``random`` draws from a counter-based hash, not a ``torch.Generator``). With
    nothing to reduce (ratio 1.0 for a selecting strategy, merge size 1 for ``spatial_pool``) the input
    tensor itself is returned.

    The reducer has no parameters or buffers: attaching it never changes a model's ``state_dict``.
    """

    def __init__(self, cfg: ReducerConfig | None = None, **kwargs: Any) -> None:
        super().__init__()
        if cfg is not None and kwargs:
            raise ValueError(f"pass either a ReducerConfig or keyword settings, not both (got {sorted(kwargs)})")
        self.cfg = cfg if cfg is not None else ReducerConfig(**kwargs)
        self.strategy: Strategy = get_strategy(self.cfg.method)
        self._generators: dict[str, torch.Generator] = {}
        self._keys = KeyStream(self.cfg.seed)

    @property
    def is_identity(self) -> bool:
        """True when the config keeps every token (the reducer then returns its input)."""
        if self.cfg.method == "spatial_pool":
            return self.cfg.spatial_merge_size == 1
        return self.cfg.keep_ratio == 1.0

    def output_tokens(self, num_tokens: int) -> int:
        """Tokens out for ``num_tokens`` tokens in (prefix included); a function of shapes and config only."""
        n_patch = num_tokens - self.cfg.num_prefix_tokens
        if n_patch < 1:
            raise ValueError(
                f"input has {num_tokens} tokens but num_prefix_tokens={self.cfg.num_prefix_tokens}: no patch tokens"
            )
        if self.is_identity:
            return num_tokens
        return self.cfg.num_prefix_tokens + self.strategy.count(n_patch, self.cfg)

    def reseed(self, seed: int | None = None) -> None:
        """Restart the ``random`` strategy's draws from ``seed`` (default: the configured one)."""
        if seed is not None:
            self.cfg.seed = int(seed)
        self._generators.clear()
        self._keys.reseed(self.cfg.seed)

    def _rng(self, device: torch.device) -> torch.Tensor | torch.Generator | None:
        """What the strategy draws from: a fresh key per call, a seeded Generator, or None."""
        if self.strategy.uses_key:
            return self._keys.next_key()
        if not self.strategy.uses_generator:
            return None
        key = str(device)
        if key not in self._generators:
            self._generators[key] = torch.Generator(device=device).manual_seed(self.cfg.seed)
        return self._generators[key]

    def reduce(self, x: torch.Tensor) -> ReductionOutput:
        """Reduce ``x`` (B, P + N, D); returns tokens (B, P + K, D) and kept patch indices (B, K)."""
        if x.dim() != 3:
            raise ValueError(f"expected features of shape (B, N, D), got shape {tuple(x.shape)}")
        p = self.cfg.num_prefix_tokens
        self.output_tokens(x.shape[1])  # validates the token count from the shape
        if self.is_identity:
            idx = torch.arange(x.shape[1] - p, device=x.device).expand(x.shape[0], -1)
            return ReductionOutput(x, idx)
        patches = x[:, p:] if p else x
        rng = self._rng(x.device)
        if self.strategy.score is not None and not self.strategy.merges:  # one gather: prefix and kept tokens
            idx = top_indices(self.strategy.score(patches, self.cfg, rng), self.strategy.count(patches.shape[1], self.cfg))
            return ReductionOutput(gather_rows(x, idx, p), idx)
        out = self.strategy.reduce(patches, self.cfg, rng)
        tokens = torch.cat([x[:, :p], out.tokens], dim=1) if p else out.tokens
        return ReductionOutput(tokens, out.indices, out.positions, out.sizes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, P + N, D) -> (B, P + K, D). What was kept is returned by :meth:`reduce`; nothing is stored."""
        return self.reduce(x).tokens

    def extra_repr(self) -> str:
        c = self.cfg
        extra = f", merge={c.spatial_merge_size}" if c.method == "spatial_pool" else f", ratio={c.keep_ratio}"
        return f"method={c.method}{extra}, prefix={c.num_prefix_tokens}"
