"""The bundled trained policy's columns of the policy-step benchmark: success on the reported (test) split and
the action error (:func:`prismatic_tr.policy.fidelity.policy_fidelity`), success on validation episodes (which
choose the best setting, :mod:`prismatic_tr.bench.vla.selection`), and one row per shipped adapter run under its
own setting.

An adapter's LoRA is merged into the weights, so its step does the setting's work with weights of the same
shapes: its speed is its setting's row's, copied, not timed twice (``speed_from`` names the row).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from prismatic_tr.envs.splits import VALIDATION, seed_split, split_seeds
from prismatic_tr.policy import (
    adapters as shipped,  # at import: its ADAPTERS_DIR is fixed when first imported
)

# Fields of a setting's row that describe the cpu-bench model's step (speed, tokens, phases): an adapter row
# copies them; the bundled policy's own fields (success, action error) it measures itself.
POLICY_FIELDS = ("success_rate", "success_ci_low", "success_ci_high", "policy_episodes", "policy_mean_steps",
                 "policy_action_l1_to_demo", "policy_action_l1_to_unreduced", "policy_token_agreement",
                 "validation_success_rate", "validation_success_ci_low", "validation_success_ci_high",
                 "validation_episodes")
# The random-weight speed model's fidelity to itself: says nothing about an adapter.
SPEED_MODEL_FIDELITY = ("action_token_agreement", "action_mae", "first_token_kl")


# Why an OpenVLA-OFT model's rows have no success columns.
NO_OFT_POLICY = ("not measured here: the bundled OFT-style policy runs at its own size, not this preset's, so OFT rows "
                 "report speed and the random model's fidelity only; its success under each setting is measured by "
                 "vla_scripts/eval_policy.py (benchmarks/results/oft_policy, and the table under the README's main one)")


def policy_success_applies(vla_path: str | None, policy_episodes: int, oft: bool = False) -> str | None:
    """None when the bundled policy's success belongs in the rows, else the reason it does not: with
    ``vla_path`` the rows describe that checkpoint, so the bundled policy's success is added only when the
    checkpoint is the bundled policy itself; an OpenVLA-OFT model (``oft``) has no policy of its own yet."""
    if oft:
        return NO_OFT_POLICY
    if policy_episodes == 0:
        return "not measured (--policy_episodes 0)"
    if vla_path is None:
        return None
    from prismatic_tr.policy.bundled import BUNDLED_POLICY_DIR

    if Path(vla_path).resolve() == BUNDLED_POLICY_DIR.resolve():
        return None
    return (f"not measured: --vla_path {vla_path} is not the bundled policy, whose success would not be this "
            "model's (measure yours with vla_scripts/eval_offline.py on your data)")


def seeds_note(split: str, episodes: int) -> str:
    first = seed_split(split).first
    return f"{episodes} closed-loop episodes per setting of the {split} split (seeds {first:,}-{first + episodes - 1:,})"


def add_test_success(records: list[dict], episodes: int, split: str,
                     on_episode: Callable[..., None] | None = None) -> str:
    """Success on ``episodes`` of ``split`` and the offline action error, merged into the records; returns the
    metadata line (or, when the bundled policy is missing, why nothing was measured)."""
    from prismatic_tr.policy.fidelity import policy_fidelity
    from prismatic_tr.vla.spec import parse_setting

    try:
        fields = policy_fidelity([parse_setting(r["setting"]) for r in records], episodes, split=split,
                                 on_episode=on_episode)
    except ValueError as err:  # the bundled policy is missing
        print(f"NOTE: no policy fidelity: {err}")
        return f"not measured: {err}"
    for rec in records:
        rec.update(fields[rec["setting"]])
    return (f"bundled tabletop policy (prismatic_tr/assets/tabletop_policy): {seeds_note(split, episodes)}, the "
            "same seeds for every setting; action error on the scripted expert's steps (offline split)")


def _validation_fields(summary: Any) -> dict[str, Any]:
    return {"validation_success_rate": summary.success_rate, "validation_success_ci_low": summary.success_ci_low,
            "validation_success_ci_high": summary.success_ci_high, "validation_episodes": summary.episodes}


def add_validation_success(records: list[dict], episodes: int,
                           on_episode: Callable[..., None] | None = None) -> str:
    """``validation_success_rate`` (with its interval) on the first ``episodes`` of the validation split, per
    record; returns the metadata line."""
    from prismatic_tr.policy.bundled import UNNORM_KEY, load_bundled_policy
    from prismatic_tr.policy.closed_loop import SuccessSummary, run_episodes
    from prismatic_tr.policy.evaluate import reduction
    from prismatic_tr.vla.spec import parse_setting

    if episodes == 0:
        return "not measured (--validation_episodes 0): no best setting is chosen"
    vla, processor = load_bundled_policy()
    seeds = list(split_seeds(VALIDATION, episodes))
    for rec in records:
        setting = parse_setting(rec["setting"])
        with reduction(vla, setting):
            outcomes = run_episodes(vla, processor, seeds, UNNORM_KEY, batch_size=25,
                                    on_episode=(lambda o, s=setting: on_episode(s.label, o)) if on_episode else None)
        rec.update(_validation_fields(SuccessSummary.of(outcomes)))
    return f"bundled tabletop policy: {seeds_note(VALIDATION, episodes)}; they choose the best setting"


def adapter_setting(name: str) -> Any:
    """The :class:`prismatic_tr.vla.spec.Setting` an adapter was trained under (its token_reduction.json)."""
    from types import SimpleNamespace

    from prismatic_tr.vla import read_settings
    from prismatic_tr.vla.spec import setting_of

    return setting_of(read_settings(SimpleNamespace(token_reduction=shipped.read_adapter(name)[0])))


def adapter_label(name: str, setting_label: str) -> str:
    return f"{setting_label} with adapter {Path(name).name}"


def _run_adapter(name: str, setting: Any, splits: Sequence[tuple[str, int]],
                 on_episode: Callable[..., None] | None) -> list[Any]:
    """SuccessSummary per (split, episodes) of the bundled policy with adapter ``name`` under ``setting``."""
    from prismatic_tr.policy.bundled import UNNORM_KEY
    from prismatic_tr.policy.closed_loop import SuccessSummary, run_episodes
    from prismatic_tr.policy.evaluate import reduction

    vla, processor = shipped.load_adapted_policy(name, apply_reduction=False)
    summaries = []
    with reduction(vla, setting):
        for split, n in splits:
            outcomes = run_episodes(vla, processor, list(split_seeds(split, n)), UNNORM_KEY, batch_size=25,
                                    on_episode=(lambda o: on_episode(name, o)) if on_episode else None)
            summaries.append(SuccessSummary.of(outcomes))
    return summaries


def adapter_row(name: str, row: dict[str, Any], test: Any, validation: Any | None) -> dict[str, Any]:
    """The record of adapter ``name``: ``row``'s (its setting's) speed fields, the adapter's own success."""
    rec = {k: v for k, v in row.items() if k not in POLICY_FIELDS}
    rec.update(dict.fromkeys(SPEED_MODEL_FIDELITY))  # the random speed model's fidelity says nothing here
    rec.update(setting=adapter_label(name, row["setting"]), method=f"{row['method']} (adapter)", adapter=Path(name).name,
               speed_from=row["setting"],
               speed_note="LoRA merged into the weights: the step is its setting's; speed copied, not timed twice",
               success_rate=test.success_rate, success_ci_low=test.success_ci_low,
               success_ci_high=test.success_ci_high, policy_episodes=test.episodes,
               policy_mean_steps=test.mean_steps)
    if validation is not None:
        rec.update(_validation_fields(validation))
    return rec


def add_adapter_rows(records: list[dict], adapters: Sequence[str], test_split: str, test_episodes: int,
                     validation_episodes: int, on_episode: Callable[..., None] | None = None) -> dict[str, str]:
    """Append one row per adapter whose setting has a row in ``records`` (inserted right after that row);
    returns ``{adapter: what was done or why not}`` for the metadata."""
    notes: dict[str, str] = {}
    for name in adapters:
        try:
            setting = adapter_setting(name)
        except ValueError as err:  # not shipped (or not found) here
            print(f"NOTE: adapter {name} not run: {err}")
            notes[name] = f"not run: {err}"
            continue
        index = next((i for i, r in enumerate(records) if r["setting"] == setting.label and not r.get("adapter")),
                     None)
        if index is None:
            notes[name] = f"not run: its setting {setting.label} is not among the benchmarked settings"
            continue
        splits = [(test_split, test_episodes)] + ([(VALIDATION, validation_episodes)] if validation_episodes else [])
        try:
            summaries = _run_adapter(name, setting, splits, on_episode)
        except (ImportError, ValueError) as err:  # peft missing, or a base the adapter was not trained on
            print(f"NOTE: adapter {name} not run: {err}")
            notes[name] = f"not run: {err}"
            continue
        row = adapter_row(name, records[index], summaries[0], summaries[1] if validation_episodes else None)
        records.insert(index + 1, row)
        notes[name] = (f"under {setting.label}: {seeds_note(test_split, test_episodes)}"
                       + (f" and {validation_episodes} of the validation split" if validation_episodes else "")
                       + "; speed copied from the setting's row (LoRA merged)")
    return notes
