"""A policy step with an injected slow phase, to test noise detection without loading the machine."""

from __future__ import annotations

import time

from prismatic_tr.bench.vla.step import PolicyStep


def slow_baseline_step(seconds: float) -> type[PolicyStep]:
    """A :class:`PolicyStep` subclass whose vision phase sleeps ``seconds`` only in the unreduced (baseline) row."""

    class SlowBaselineVision(PolicyStep):
        def run(self, call=None):  # type: ignore[no-untyped-def]
            from prismatic_tr.vla import get_token_reduction

            self._baseline = get_token_reduction(self.user_model) is None and \
                get_token_reduction(self.user_model, site="llm") is None
            return super().run(call)

        def vision(self):  # type: ignore[no-untyped-def]
            if getattr(self, "_baseline", False):
                time.sleep(seconds)
            return super().vision()

    return SlowBaselineVision
