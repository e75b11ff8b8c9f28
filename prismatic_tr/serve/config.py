"""The server's limits: how requests are batched and what a request may hold. One dataclass, validated."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ServeLimits:
    """Batching and request limits of :func:`prismatic_tr.serve.create_app`.

    max_batch: requests stacked into one ``predict_action`` at most. max_wait_ms: how long the batcher, once
    the model is free, waits for more requests, only while fewer are queued than were in play when the last batch
    ended, so a lone client (batches of one) never waits. max_body_bytes: larger bodies get 413. Images are uint8
    (H, W, 3) with both sides in [min_image_side, max_image_side]; instructions hold 1 to max_instruction_chars
    characters.
    """

    max_batch: int = 16
    max_wait_ms: float = 10.0
    max_body_bytes: int = 8 * 2**20
    min_image_side: int = 16
    max_image_side: int = 1024
    max_instruction_chars: int = 512

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_body_bytes", "min_image_side", "max_image_side", "max_instruction_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is not allowed; use an integer >= 1")
        if self.min_image_side > self.max_image_side:
            raise ValueError(f"min_image_side={self.min_image_side} > max_image_side={self.max_image_side}; the "
                             "smallest side allowed must not exceed the largest")
        wait = self.max_wait_ms
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 10_000:
            raise ValueError(f"max_wait_ms={wait!r} is not allowed; use a number of milliseconds in [0, 10000]")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
