"""Where a MetaWorld policy fails: per-step traces of its episodes, the phase each episode reached, how far it ended
from the object and the goal, and how its hand follows what varies between episodes (``benchmarks/metaworld_failures.py``).

    from prismatic_tr.policy.metaworld_diagnosis import trace_policy, trace_expert, summarise
    policy = trace_policy(vla, processor, "push-v3", seeds)      # [EpisodeTrace], the policy's closed loop
    expert = trace_expert("push-v3", seeds)                       # the scripted expert on the same seeds
    record = summarise(policy, expert)                            # phases, distances, correlations (JSON-ready)

A trace keeps MetaWorld's raw observation after every step (the first object ``obs[4:7]``: reach, push,
pick-place: the puck; peg-insert-side: the peg's grasp point; the goal ``obs[-3:]``) and the point between the
fingers, MetaWorld's ``tcp_center``, which its success and grasp checks read (``obs[0:3]``, the hand body, is a few
centimetres above it): "hand" below means that point. Phases of the object tasks, in order (an episode
is counted at the furthest it reached):

    approach   the hand came within ``NEAR`` of the object
    contact    the object moved more than ``MOVED`` from where it started
    lift       the object rose more than ``LIFT`` (pick-place, peg-insert-side only: push slides the puck)
    transport  the object came within half of its starting distance to the goal
    success    MetaWorld's success

Reach has one phase before success: ``transport`` is the hand within half its starting distance of the goal.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

NEAR = 0.03        # m: hand-object distance that counts as reaching the object (the expert gets to ~0.01)
MOVED = 0.01       # m: object displacement that counts as contact
LIFT = 0.02        # m: object rise that counts as lifted
LIFT_TASKS = ("pick-place-v3", "peg-insert-side-v3")
PHASES = ("none", "approach", "contact", "lift", "transport", "success")


@dataclass
class EpisodeTrace:
    """One episode: ``raw`` (T + 1, 39) MetaWorld observations and ``tcp`` (T + 1, 3) the point between the fingers,
    from the reset on, and how it ended."""

    task: str
    seed: int
    outcome: str
    raw: np.ndarray
    tcp: np.ndarray

    @property
    def hand(self) -> np.ndarray:
        return self.tcp

    @property
    def obj(self) -> np.ndarray:
        return self.raw[:, 4:7]

    @property
    def goal(self) -> np.ndarray:
        return self.raw[-1, -3:]


def phase_reached(trace: EpisodeTrace) -> str:
    """The furthest phase of :data:`PHASES` the episode reached (module docstring)."""
    if trace.outcome == "success":
        return "success"
    if trace.task == "reach-v3":
        dist = np.linalg.norm(trace.hand - trace.goal, axis=1)
        return "transport" if dist.min() < dist[0] / 2 else "none"
    obj, hand = trace.obj, trace.hand
    to_goal = np.linalg.norm(obj - trace.goal, axis=1)
    reached = "none"
    checks = [("approach", np.linalg.norm(hand - obj, axis=1).min() < NEAR),
              ("contact", np.linalg.norm(obj - obj[0], axis=1).max() > MOVED),
              ("lift", (obj[:, 2] - obj[0, 2]).max() > LIFT),
              ("transport", to_goal.min() < to_goal[0] / 2)]
    for name, hit in checks:
        if name == "lift" and trace.task not in LIFT_TASKS:
            continue
        if not hit:
            break
        reached = name
    return reached


def episode_row(trace: EpisodeTrace) -> dict[str, Any]:
    """One episode's numbers: phase, steps, the hand's closest approach to the object, the object's (the hand's for
    reach) start / closest / last distance to the goal, in metres."""
    target = trace.hand if trace.task == "reach-v3" else trace.obj
    to_goal = np.linalg.norm(target - trace.goal, axis=1)
    return {"seed": trace.seed, "outcome": trace.outcome, "phase": phase_reached(trace),
            "steps": len(trace.raw) - 1,
            "hand_object_min": round(float(np.linalg.norm(trace.hand - trace.obj, axis=1).min()), 4),
            "to_goal_start": round(float(to_goal[0]), 4), "to_goal_min": round(float(to_goal.min()), 4),
            "to_goal_last": round(float(to_goal[-1]), 4)}


def closest_offsets(traces: Sequence[EpisodeTrace]) -> np.ndarray:
    """(E, 3): the hand minus the object at the hand's closest approach to it, per episode."""
    rows = []
    for t in traces:
        i = int(np.linalg.norm(t.hand - t.obj, axis=1).argmin())
        rows.append(t.hand[i] - t.obj[i])
    return np.stack(rows)


def following(traces: Sequence[EpisodeTrace], target: str) -> dict[str, Any]:
    """Per axis x, y over episodes: the correlation between where ``target`` ("goal" or "object", at the reset) is
    and where the hand is (at its last step for "goal", its closest approach to the object for "object"), with both
    spreads (m). Near 1 with equal spreads: the hand goes where the target is."""
    if target == "goal":
        where = np.stack([t.goal for t in traces])
        hand = np.stack([t.hand[-1] for t in traces])
    else:
        where = np.stack([t.obj[0] for t in traces])
        hand = where + closest_offsets(traces)
    out = {}
    for axis, name in ((0, "x"), (1, "y")):
        with np.errstate(invalid="ignore", divide="ignore"):   # no spread: no correlation (nan)
            corr = np.corrcoef(where[:, axis], hand[:, axis])[0, 1] if len(traces) > 1 else float("nan")
        out[name] = {"correlation": round(float(corr), 3), "target_spread_m": round(float(where[:, axis].std()), 4),
                     "hand_spread_m": round(float(hand[:, axis].std()), 4)}
    return out


def summarise(policy: Sequence[EpisodeTrace], expert: Sequence[EpisodeTrace]) -> dict[str, Any]:
    """A task's diagnosis record: the policy's and the expert's success, phase counts, median distances, the hand's
    offset from the object at its closest approach (mean and spread, m), how the hand follows goal and object, and
    the policy's episodes one by one."""
    def block(traces: Sequence[EpisodeTrace]) -> dict[str, Any]:
        rows = [episode_row(t) for t in traces]
        failed = [r for r in rows if r["outcome"] != "success"]
        offsets = closest_offsets(traces)
        return {"episodes": len(rows), "successes": len(rows) - len(failed),
                "phases": {p: sum(r["phase"] == p for r in rows) for p in PHASES},
                "failed_median": {k: float(np.median([r[k] for r in failed])) if failed else None
                                  for k in ("hand_object_min", "to_goal_start", "to_goal_min", "to_goal_last")},
                "closest_offset_mean_m": np.round(offsets.mean(0), 4).tolist(),
                "closest_offset_std_m": np.round(offsets.std(0), 4).tolist(),
                "follows_goal": following(traces, "goal"), "follows_object": following(traces, "object"),
                "rows": rows}

    return {"task": policy[0].task, "policy": block(policy), "expert": block(expert)}


def trace_policy(vla: Any, processor: Any, task: str, seeds: Sequence[int], unnorm_key: str = "metaworld_mt10",
                 image_size: int = 224, execute_steps: int | None = None) -> list[EpisodeTrace]:
    """The policy's closed loop on ``seeds`` of ``task`` (one lockstep batch), traced step by step. Renders: call it
    where tensorflow was never imported."""
    from prismatic_tr.envs.metaworld.episode import MetaWorldEpisode
    from prismatic_tr.policy.closed_loop import run_episodes

    raw: dict[int, list[np.ndarray]] = {}
    tcp: dict[int, list[np.ndarray]] = {}

    class Traced(MetaWorldEpisode):
        def reset(self):  # noqa: ANN202 - MetaWorldEpisode.reset's LazyObservation
            obs = super().reset()
            raw[self.seed], tcp[self.seed] = [self.env._raw.copy()], [self.env.env.tcp_center.copy()]
            return obs

        def step(self, action: np.ndarray):  # noqa: ANN202 - MetaWorldEpisode.step's EpisodeStep
            out = super().step(action)
            raw[self.seed].append(self.env._raw.copy())
            tcp[self.seed].append(self.env.env.tcp_center.copy())
            return out

    outcomes = run_episodes(vla, processor, list(seeds), unnorm_key, batch_size=len(seeds),
                            execute_steps=execute_steps, make_env=lambda s: Traced(task, s, image_size))
    return [EpisodeTrace(task, o.seed, o.outcome, np.stack(raw[o.seed]), np.stack(tcp[o.seed])) for o in outcomes]


def trace_expert(task: str, seeds: Sequence[int]) -> list[EpisodeTrace]:
    """MetaWorld's scripted expert on ``seeds`` of ``task`` under the task's step cap (no rendering), traced."""
    from prismatic_tr.envs.metaworld.env import MetaWorldEnv, scripted_expert

    traces = []
    with MetaWorldEnv(task, render=False) as env:
        expert = scripted_expert(task)
        for seed in seeds:
            obs = env.reset(seed)
            raw, tcp = [obs.raw], [env.env.tcp_center.copy()]
            while not env.done:
                obs = env.step(expert(obs)).observation
                raw.append(obs.raw)
                tcp.append(env.env.tcp_center.copy())
            traces.append(EpisodeTrace(task, int(seed), env.outcome, np.stack(raw), np.stack(tcp)))
    return traces


def validation_curves(evaluation: dict[str, Any]) -> dict[str, dict[int, int]]:
    """``{task: {step: validation successes}}`` from a MetaWorld recipe's ``evaluation.json`` (its checkpoint
    choice scores every saved step on the same validation episodes of every task)."""
    curves: dict[str, dict[int, int]] = {}
    for candidate in evaluation.get("selection", {}).get("candidates", []):
        for task, successes in candidate["per_task"].items():
            curves.setdefault(task, {})[int(candidate["step"])] = int(successes)
    return curves


def loss_curve(rows: Sequence[dict[str, Any]], every: int = 500) -> dict[int, float]:
    """``{first step of a window: mean L1 loss over it}`` from a recipe's ``training_curve.csv`` rows."""
    out = {}
    for start in range(0, len(rows), every):
        window = [float(r["loss"]) for r in rows[start:start + every]]
        out[int(float(rows[start]["step"]))] = round(float(np.mean(window)), 4)
    return out


def failures_markdown(records: Sequence[dict[str, Any]], command: str) -> str:
    """``failures.md``: per task, the policy's and the expert's successes, phases reached, failed episodes' median
    distances, closest offset and how the hand follows the goal and the object (records of :func:`summarise`)."""
    lines = [f"# MetaWorld failures ({command})", "",
             "| task | who | success | none | approach | contact | lift | transport | failed: hand-object min (m) "
             "| failed: to goal start / min / last (m) | closest offset x y z (mean, m) | follows goal x / y (r) "
             "| follows object x / y (r) |", "|" + " --- |" * 13]
    for rec in records:
        for who in ("policy", "expert"):
            b = rec[who]
            m = b["failed_median"]
            dist = ("-" if m["to_goal_start"] is None else
                    f"{m['to_goal_start']:.3f} / {m['to_goal_min']:.3f} / {m['to_goal_last']:.3f}")
            hand = "-" if m["hand_object_min"] is None else f"{m['hand_object_min']:.3f}"
            g, o = b["follows_goal"], b["follows_object"]
            lines.append(f"| {rec['task']} | {who} | {b['successes']}/{b['episodes']} | "
                         + " | ".join(str(b["phases"][p]) for p in ("none", "approach", "contact", "lift", "transport"))
                         + f" | {hand} | {dist} | {' '.join(f'{v:+.3f}' for v in b['closest_offset_mean_m'])} | "
                         f"{g['x']['correlation']:+.2f} / {g['y']['correlation']:+.2f} | "
                         f"{o['x']['correlation']:+.2f} / {o['y']['correlation']:+.2f} |")
    return "\n".join(lines) + "\n"


def curves_markdown(vla_path: Path, command: str) -> str:
    """``curves.md``: the validation curve per task and the loss curve of the recipe run that made ``vla_path`` (its
    ``evaluation.json`` and ``training_curve.csv``)."""
    import csv
    import json
    import os

    record = json.loads((vla_path / "evaluation.json").read_text())
    curves = validation_curves(record)
    steps = sorted({s for c in curves.values() for s in c})
    episodes = record["selection"].get("episodes_per_task")
    shown = os.path.relpath(vla_path) if vla_path.is_absolute() else str(vla_path)
    lines = [f"# Curves of {shown} ({command})", "",
             f"Validation successes of {episodes} episodes per task at each saved step (the recipe's choice):", "",
             "| task | " + " | ".join(f"step {s}" for s in steps) + " |", "|" + " --- |" * (len(steps) + 1)]
    lines += [f"| {task} | " + " | ".join(str(c.get(s, "-")) for s in steps) + " |" for task, c in curves.items()]
    with open(vla_path / "training_curve.csv", newline="") as f:
        losses = loss_curve(list(csv.DictReader(f)))
    lines += ["", "Mean L1 loss (normalised chunk) per 500 steps:", "",
              "| " + " | ".join(f"{s}-{s + 499}" for s in losses) + " |", "|" + " --- |" * len(losses),
              "| " + " | ".join(f"{v:.4f}" for v in losses.values()) + " |"]
    return "\n".join(lines) + "\n"


def diagnose_failures(vla_path: Path, tasks: Sequence[str], episodes: int, command: str,
                      setting: str = "none") -> Iterator[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Load ``vla_path`` and, task by task, trace the policy (reduced by ``setting``, a spec; "none": unreduced)
    and the expert on the first ``episodes`` validation seeds; after every task yield ``(meta, records so far)``
    (one :func:`summarise` record a task, with its ``wall_s``), printing a progress line. ValueError for a bad
    ``setting``, before any episode. Renders: call it where tensorflow was never imported."""
    from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
    from prismatic_tr.envs.splits import split_seeds
    from prismatic_tr.models import load_vla
    from prismatic_tr.vla import apply_token_reduction_spec
    from prismatic_tr.vla.spec import parse_setting

    spec = parse_setting(setting)
    vla, processor = load_vla(vla_path)
    if not spec.is_baseline:
        apply_token_reduction_spec(vla, spec)
    seeds = split_seeds("validation", episodes, splits=METAWORLD_SPLITS)
    meta = {"command": command, "vla_path": str(vla_path), "split": "validation", "seeds": [seeds[0], seeds[-1]],
            "setting": spec.label}
    records: list[dict[str, Any]] = []
    for task in tasks:
        start = time.perf_counter()
        records.append(summarise(trace_policy(vla, processor, task, seeds), trace_expert(task, seeds)))
        records[-1]["wall_s"] = round(time.perf_counter() - start, 1)
        print(f"{task}: policy {records[-1]['policy']['successes']}/{episodes}, phases "
              f"{records[-1]['policy']['phases']} ({records[-1]['wall_s']:.0f} s)", flush=True)
        yield meta, records
