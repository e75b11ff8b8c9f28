"""What each reduction setting costs the bundled trained policy: closed-loop success on unseen episodes and the
action error on the scripted expert's steps. The policy-step benchmark reports it beside its speed columns
(settings are fractions of tokens and of depth, applied to each model; a depth fraction rounds to a block
differently on towers of different depth, so each record says where it cut: ``cut`` / ``policy_cut``).

Seeds (:mod:`prismatic_tr.envs.splits`): closed-loop episodes from the "validation" split by default (choosing
settings is a decision; pass ``split="test"`` for a held-out report), expert steps from the "offline" split."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from prismatic_tr.envs.splits import OFFLINE, VALIDATION, seed_split, split_seeds
from prismatic_tr.policy.bundled import UNNORM_KEY, load_bundled_policy
from prismatic_tr.policy.evaluate import evaluate_settings
from prismatic_tr.policy.offline import evaluate_offline, expert_steps
from prismatic_tr.vla.spec import Setting

EVAL_SEED = seed_split(VALIDATION).first  # 1,000,000: first closed-loop episode of the default split
OFFLINE_SEED = seed_split(OFFLINE).first  # 2,000,000: first episode of the expert's steps


def policy_fidelity(settings: Sequence[Setting], episodes: int, offline_episodes: int = 8,
                    batch_size: int = 25, split: str = VALIDATION,
                    on_episode: Callable[[str, Any], None] | None = None) -> dict[str, dict[str, Any]]:
    """``{setting label: fields}``: ``success_rate``, ``success_ci_low``, ``success_ci_high``, ``policy_episodes``,
    ``policy_mean_steps`` (closed loop, the first ``episodes`` seeds of ``split``), and ``policy_action_l1_to_demo``,
    ``policy_action_l1_to_unreduced``, ``policy_token_agreement`` (the expert's steps of the first
    ``offline_episodes`` seeds of the offline split), ``policy_cut`` (where the reductions cut on the policy). ValueError when the bundled policy is missing or the seeds
    leave their splits. ``on_episode(setting label, outcome)`` is called as each closed-loop episode ends."""
    seeds = list(split_seeds(split, episodes))
    offline_seeds = split_seeds(OFFLINE, offline_episodes)
    vla, processor = load_bundled_policy()
    closed = evaluate_settings(vla, processor, settings, seeds, UNNORM_KEY, batch_size=batch_size, timing_repeats=0,
                               on_episode=on_episode)
    steps = expert_steps(offline_seeds)
    offline = evaluate_offline(vla, processor, settings, steps, UNNORM_KEY, batch_size=16)
    out = {}
    for c, o in zip(closed, offline, strict=True):
        out[c["setting"]] = {
            "success_rate": c["success_rate"], "success_ci_low": c["success_ci_low"],
            "success_ci_high": c["success_ci_high"], "policy_episodes": c["episodes"],
            "policy_mean_steps": c["mean_steps"], "policy_action_l1_to_demo": o["action_l1_to_demo"],
            "policy_action_l1_to_unreduced": o["action_l1_to_unreduced"],
            "policy_token_agreement": o["token_agreement"], "policy_cut": c["cut"],
        }
    return out
