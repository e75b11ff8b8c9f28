"""Where a pooled token should sit (``benchmarks/pool_positions.py``): the bundled tabletop policy closed loop on
validation episodes under ``spatial_pool`` with every ``ReducerConfig.pool_position`` rule and v0.2's compact
numbering, for 2 x 2 and 4 x 4 windows, the same episodes for every row.
"""

from __future__ import annotations

import time
from typing import Any

import torch  # noqa: F401  (torch before tensorflow)

from prismatic_tr.envs.splits import VALIDATION, split_seeds
from prismatic_tr.policy.bundled import UNNORM_KEY, load_bundled_policy
from prismatic_tr.policy.closed_loop import SuccessSummary, run_episodes
from prismatic_tr.reducers.config import POOL_POSITIONS
from prismatic_tr.vla import apply_token_reduction_to_vla, get_token_reduction, remove_token_reduction


def pool_positions(episodes: int, command: str) -> dict[str, Any]:
    """The record: success per window and position rule on the first ``episodes`` validation seeds, and the
    unreduced policy's; ``command`` kept in it."""
    vla, processor = load_bundled_policy()
    seeds = list(split_seeds(VALIDATION, episodes))
    rows = []
    for merge in (2, 4):
        for rule in (*POOL_POSITIONS, "compact"):
            positions = "compact" if rule == "compact" else "original"
            apply_token_reduction_to_vla(vla, "spatial_pool", spatial_merge_size=merge, positions=positions)
            if rule != "compact":
                get_token_reduction(vla).reducer.cfg.pool_position = rule
            start = time.perf_counter()
            try:
                summary = SuccessSummary.of(run_episodes(vla, processor, seeds, UNNORM_KEY, batch_size=25))
            finally:
                remove_token_reduction(vla)
            rows.append({"window": f"{merge}x{merge}", "position": rule, "episodes": summary.episodes,
                         "success_rate": summary.success_rate, "success_ci_low": summary.success_ci_low,
                         "success_ci_high": summary.success_ci_high, "mean_steps": summary.mean_steps,
                         "wall_s": round(time.perf_counter() - start, 1)})
            print(rows[-1], flush=True)
    base = SuccessSummary.of(run_episodes(vla, processor, seeds, UNNORM_KEY, batch_size=25))
    record = {"command": command,
              "split": VALIDATION, "seeds": [seeds[0], seeds[-1]], "unreduced_success": base.success_rate,
              "rows": rows}
    return record
