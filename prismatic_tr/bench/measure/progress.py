"""One progress bar over a job made of several kinds of work, so that its estimate of the time left covers the
whole job and not only the part running now.

Each kind of unit (a timed round of one setting, an episode, ...) is weighted by the seconds it is expected to
take; the bar counts weighted units, so tqdm's rate and remaining-time estimate stay meaningful when the job
moves from one kind to the next. The weights only shape the estimate: nothing is timed with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class JobProgress:
    """``plan``: ``{kind: (count, seconds each)}``; call :meth:`step` as each unit of a kind finishes."""

    def __init__(self, plan: Mapping[str, tuple[int, float]], desc: str = "job", enabled: bool = True) -> None:
        from tqdm.auto import tqdm

        unknown = [k for k, (n, w) in plan.items() if n < 0 or w <= 0]
        if unknown:
            raise ValueError(f"plan entries {unknown} need a count >= 0 and seconds > 0")
        self.weights = {kind: w for kind, (_, w) in plan.items()}
        self.total, self.done = sum(n * w for n, w in plan.values()), 0.0
        total = self.total
        self.bar = tqdm(total=round(total, 1), desc=desc, unit="s", disable=not enabled,
                        bar_format="{l_bar}{bar}| {elapsed} elapsed, ~{remaining} left")

    def step(self, kind: str, *_: Any) -> None:
        """One unit of ``kind`` done (extra arguments are ignored, so it can be passed as a callback)."""
        self.done += self.weights[kind]
        self.bar.update(self.weights[kind])

    def close(self) -> None:
        self.bar.close()
