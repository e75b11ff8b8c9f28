"""What each reduction setting costs the bundled trained policy: closed-loop success on unseen episodes and the
action error on the scripted expert's steps. The policy-step benchmark reports it beside its speed columns
(settings are fractions of tokens and of depth, so one setting means the same on both models)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prismatic_tr.bench.vla.specs import Setting
from prismatic_tr.policy.bundled import UNNORM_KEY, load_bundled_policy
from prismatic_tr.policy.evaluate import evaluate_settings
from prismatic_tr.policy.offline import evaluate_offline, expert_steps

EVAL_SEED = 1_000_000  # unseen by the bundled policy's demonstrations (seeds below 1e6)
OFFLINE_SEED = 2_000_000


def policy_fidelity(settings: Sequence[Setting], episodes: int, offline_episodes: int = 8,
                    batch_size: int = 25) -> dict[str, dict[str, Any]]:
    """``{setting label: fields}``: ``success_rate``, ``success_ci_low``, ``success_ci_high``, ``policy_episodes``,
    ``policy_mean_steps`` (closed loop, ``episodes`` unseen seeds), and ``policy_action_l1_to_demo``,
    ``policy_action_l1_to_unreduced``, ``policy_token_agreement`` (the expert's steps of ``offline_episodes``
    further unseen episodes). ValueError when the bundled policy is missing."""
    vla, processor = load_bundled_policy()
    seeds = list(range(EVAL_SEED, EVAL_SEED + episodes))
    closed = evaluate_settings(vla, processor, settings, seeds, UNNORM_KEY, batch_size=batch_size, timing_repeats=0)
    steps = expert_steps(range(OFFLINE_SEED, OFFLINE_SEED + offline_episodes))
    offline = evaluate_offline(vla, processor, settings, steps, UNNORM_KEY, batch_size=16)
    out = {}
    for c, o in zip(closed, offline, strict=True):
        out[c["setting"]] = {
            "success_rate": c["success_rate"], "success_ci_low": c["success_ci_low"],
            "success_ci_high": c["success_ci_high"], "policy_episodes": c["episodes"],
            "policy_mean_steps": c["mean_steps"], "policy_action_l1_to_demo": o["action_l1_to_demo"],
            "policy_action_l1_to_unreduced": o["action_l1_to_unreduced"],
            "policy_token_agreement": o["token_agreement"],
        }
    return out
