"""Closed-loop evaluation of reduction settings: success on the tabletop task and end-to-end step time.

For each setting (:mod:`prismatic_tr.vla.spec`; the unreduced baseline first) the reduction is
attached, the same episodes run (:func:`prismatic_tr.policy.closed_loop.run_episodes`), and the reduction is
removed. Step time: the model's own ``predict_action`` at batch 1 on the first episode's first observation,
every setting timed round-robin after a warm-up (``prismatic_tr.bench.measure.timing.interleaved``, the
reduction attached outside the timed region), medians with p10 / p90.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from prismatic_tr.bench.measure.timing import interleaved
from prismatic_tr.envs import TaskConfig, make_episode
from prismatic_tr.policy.closed_loop import (
    EpisodeOutcome,
    SuccessSummary,
    evaluation_record,
    observing,
    outcome_counts,
    policy_inputs,
    run_episodes,
)
from prismatic_tr.vla import reduction_cut, reductions_attached, visual_token_count
from prismatic_tr.vla.spec import Setting


def reduction(vla: nn.Module, setting: Setting, seed: int = 0) -> contextlib.AbstractContextManager[Any]:
    """``setting``'s reductions attached for the block (none for the baseline), removed after it."""
    return reductions_attached(vla, setting.reductions(seed))


def llm_visual_tokens(setting: Setting, projector_tokens: int) -> int:
    """Visual tokens the LLM's later layers hold: the llm site's share of what the projector hands it."""
    from prismatic_tr.reducers import num_kept

    llm = next((p for p in setting.parts if p.site == "llm"), None)
    return num_kept(projector_tokens, llm.keep_ratio) if llm is not None else projector_tokens


def setting_fields(setting: Setting, tokens: int, timing: dict[str, Any] | None) -> dict[str, Any]:
    """What a table row says of its setting besides success: label, site(s), the first part's ratio and depth, the
    visual tokens (``tokens``: the projector's; and past the llm site's cut), and ``predict_action``'s median, p10
    and p90 from ``timing`` (``{label: TimingStats}``; None: not timed)."""
    first = setting.parts[0] if setting.parts else setting
    stats = timing[setting.label].as_dict() if timing is not None else {"median": None, "p10": None, "p90": None}
    return {"setting": setting.label, "site": "+".join(p.site for p in setting.parts) or "none",
            "reduction_ratio": first.keep_ratio, "depth_fraction": first.depth_fraction,
            "num_patches": tokens, "llm_visual_tokens": llm_visual_tokens(setting, tokens),
            "predict_action_ms": stats["median"], "predict_action_ms_p10": stats["p10"],
            "predict_action_ms_p90": stats["p90"]}


def add_speedups(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``predict_action_speedup`` on every record: the first (the baseline's) median over its own (None untimed)."""
    base = records[0]["predict_action_ms"]
    for rec in records:
        rec["predict_action_speedup"] = base / rec["predict_action_ms"] if base is not None else None
    return records


def time_settings(vla: nn.Module, processor: Any, settings: Sequence[Setting], unnorm_key: str,
                  config: TaskConfig | None, seed: int, warmup: int, repeats: int) -> dict[str, Any]:
    """``predict_action`` at batch 1 per setting, interleaved; ``{label: TimingStats}`` (an OFT model: one chunk
    from both cameras and the state, as in the closed loop)."""
    env = make_episode(seed, config, third_person=observing(vla).third_person)
    inputs = policy_inputs(vla, processor, env, env.reset(), unnorm_key)
    fns = {s.label: (lambda: vla.predict_action(**inputs)) for s in settings}
    contexts = {s.label: (lambda s=s: reduction(vla, s)) for s in settings}
    with torch.no_grad():
        return interleaved(fns, warmup=warmup, repeats=repeats, contexts=contexts)


def evaluate_settings(
    vla: nn.Module,
    processor: Any,
    settings: Sequence[Setting],
    seeds: Sequence[int],
    unnorm_key: str,
    config: TaskConfig | None = None,
    batch_size: int = 25,
    timing_repeats: int = 10,
    timing_warmup: int = 2,
    on_episode: Callable[[str, EpisodeOutcome], None] | None = None,
    execute_steps: int | None = None,
) -> list[dict[str, Any]]:
    """One record per setting (baseline first): success with its Wilson interval, episodes, mean steps, the
    episodes per outcome (``outcome_success``, ``outcome_timeout``, ``outcome_wrong_object``), the first and last
    seed and the failed seeds by outcome (``seeds``, ``failed_seeds``: each episode's outcome, so two records of the
    same seeds pair episode by episode, :func:`~prismatic_tr.policy.closed_loop.record_successes`), the tokens the
    projector and the LLM see, ``predict_action`` medians and the speedup over the baseline
    (None with ``timing_repeats=0``). ``execute_steps``: an OFT model's chunk actions run open loop per prediction
    (:func:`prismatic_tr.policy.closed_loop.run_episodes`)."""
    if not settings or not settings[0].is_baseline:
        raise ValueError("settings must start with the unreduced baseline ('none')")
    timing = time_settings(vla, processor, settings, unnorm_key, config, seeds[0], timing_warmup, timing_repeats) \
        if timing_repeats > 0 else None
    records = []
    for s in settings:
        with reduction(vla, s):
            tokens, cut = visual_token_count(vla), reduction_cut(vla)
            outcomes = run_episodes(vla, processor, seeds, unnorm_key, config, batch_size,
                                    on_episode=(lambda o, s=s: on_episode(s.label, o)) if on_episode else None,
                                    execute_steps=execute_steps)
        episodes = evaluation_record(outcomes)
        records.append({"method": s.family, **setting_fields(s, tokens, timing), "cut": cut,
                        **dataclasses.asdict(SuccessSummary.of(outcomes)),
                        **{f"outcome_{name}": n for name, n in outcome_counts(outcomes).items()},
                        "seeds": episodes["seeds"], "failed_seeds": episodes["failed_seeds"]})
    return add_speedups(records)
