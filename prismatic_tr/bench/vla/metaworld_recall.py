"""Which patches a selection keeps on MetaWorld: per camera and per task, the object, the goal marker and the
gripper (``benchmarks/metaworld_recall.py``, issue 48's first question: why reduction costs more here than on the
tabletop task).

Per task and validation-split seed, two observations: the first, and the one halfway along MetaWorld's scripted
expert's own episode (the gripper at work). Each camera's patches are labelled from a segmentation render
(:mod:`prismatic_tr.envs.metaworld.patch_labels`); the policy's towers run with each setting attached and the call
record says which of the 2 x 256 patches reach the projector (``kept``, positions among the unreduced ones, the
first camera's first). Per (setting, task, camera): how many tokens the camera kept, and the recall of each label
(labelled patches kept / labelled patches), with the labels' area. ``random`` at the same keep is the floor a
selection that ignores content would reach.

And what the policy reads there, unreduced: per (task, camera) the share of the action slots' attention on the
visual tokens that lands on the camera and on each label's patches (:func:`label_attention`, from the layers' own
projections, :mod:`prismatic_tr.bench.vla.oft_attention`), beside the share of the visual tokens the label covers:
a label read more than its area is one a selection must keep.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prismatic_tr.envs.metaworld.patch_labels import LABELS

CAMERAS = ("corner3", "gripperPOV")  # the policy's image order: primary camera, then the wrist
SETTINGS = ("random:0.25", "diverse:0.5", "diverse:0.25", "diverse:0.1", "vision:random:0.25@0.25",
            "vision:diverse:0.5@0.25", "vision:diverse:0.25@0.25", "vision:diverse:0.1@0.25")


def observations(task: str, seeds: Sequence[int]) -> Iterator[tuple[Any, dict[str, dict[str, np.ndarray]]]]:
    """Per seed the first observation and the one halfway along the expert's episode, each with its per-camera
    patch labels (``{camera: {label: (256,) bool}}``)."""
    from prismatic_tr.envs.metaworld.env import MetaWorldEnv, scripted_expert
    from prismatic_tr.envs.metaworld.patch_labels import PatchLabeller

    for seed in seeds:
        with MetaWorldEnv(task) as env:
            obs, expert, path = env.reset(seed), scripted_expert(task), []
            while not env.done:  # the expert's own episode, state only, to find its middle
                path.append(expert(obs))
                obs = env.step(path[-1]).observation
            obs = env.reset(seed)
            with PatchLabeller(env) as labeller:
                yield obs, {c: labeller.labels(c) for c in CAMERAS}
                for action in path[: len(path) // 2]:
                    obs = env.step(action).observation
                yield obs, {c: labeller.labels(c) for c in CAMERAS}


def kept_mask(vla: torch.nn.Module, pixel_values: torch.Tensor, spec: str, patches: int) -> np.ndarray:
    """(n_cameras * patches,) bool: the patches ``spec`` passes to the projector on one observation."""
    from prismatic_tr.vla import apply_token_reduction_spec, reduction_call, remove_token_reduction

    apply_token_reduction_spec(vla, spec)
    try:
        with torch.no_grad(), reduction_call(vla) as call:
            vla.vision_backbone(pixel_values)
        kept = call.kept[0].long().numpy()
    finally:
        remove_token_reduction(vla)
    mask = np.zeros(vla.vision_backbone.get_num_images_in_input() * patches, dtype=bool)
    mask[kept] = True
    return mask


def label_attention(vla: Any, inputs: dict[str, Any], labels: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, float]]:
    """Per camera: ``camera``, the share of the action slots' attention on the visual tokens that lands on this
    camera's tokens, and per label the share on the patches showing it; the mean over the layers, heads and the
    positions the head reads (batch 1, no reduction attached, a causal OFT policy with a state)."""
    from prismatic_tr.bench.vla.oft_attention import layer_attention

    probs = layer_attention(vla, inputs)
    slots, patches = vla.oft.num_action_slots, len(labels[CAMERAS[0]][LABELS[0]])
    out = {camera: dict.fromkeys(("camera", *LABELS), 0.0) for camera in CAMERAS}
    for p in probs:  # (H, T, T) per layer: [BOS, visual, proprio, prompt, slots, stop]
        t = p.shape[-1]
        read = p[:, t - slots - 2 : t - 2, 1 : 1 + len(CAMERAS) * patches]  # (H, S, visual)
        share = (read / read.sum(-1, keepdim=True)).mean(dim=(0, 1))  # (visual,) sums to 1
        for c, camera in enumerate(CAMERAS):
            own = share[c * patches : (c + 1) * patches]
            out[camera]["camera"] += float(own.sum()) / len(probs)
            for label in LABELS:
                out[camera][label] += float(own[torch.as_tensor(labels[camera][label])].sum()) / len(probs)
    return out


def attention_rows(per_task: dict[str, list[dict[str, dict[str, float]]]],
                   patches: dict[str, list[dict[str, dict[str, int]]]]) -> list[dict[str, Any]]:
    """One row per (task, camera) and one per camera over all tasks (``task`` "all"): the mean over the
    observations of :func:`label_attention` (``attention_camera``, ``<label>_attention``) and of each label's share
    of the visual tokens (``<label>_area``)."""
    rows = []
    for task in [*per_task, "all"]:
        shares = [s for t in per_task for s in per_task[t]] if task == "all" else per_task[task]
        areas = [a for t in patches for a in patches[t]] if task == "all" else patches[task]
        for camera in CAMERAS:
            row: dict[str, Any] = {"task": task, "camera": camera, "observations": len(shares),
                                   "attention_camera": round(float(np.mean([s[camera]["camera"] for s in shares])), 4)}
            for label in LABELS:
                row[f"{label}_attention"] = round(float(np.mean([s[camera][label] for s in shares])), 4)
                row[f"{label}_area"] = round(float(np.mean([a[camera][label] for a in areas])), 4)
            rows.append(row)
    return rows


def attention_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The over-all-tasks rows of :func:`attention_rows`: per camera, the attention share and, per label, its
    attention share against its area (both of the visual tokens)."""
    head = ["camera", "attention on the camera", *(f"{label}: attention / area" for label in LABELS)]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for r in rows:
        if r["task"] == "all":
            lines.append("| " + " | ".join([r["camera"], f"{100 * r['attention_camera']:.0f} %", *(
                f"{100 * r[f'{label}_attention']:.1f} % / {100 * r[f'{label}_area']:.1f} %" for label in LABELS)]) + " |")
    return "\n".join(lines)


def recall_rows(vla: Any, processor: Any, tasks: Sequence[str], episodes: int,
                settings: Sequence[str] = SETTINGS,
                attention: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per (setting, task, camera): ``kept_tokens`` (mean per observation), per label ``<label>_patches``
    (mean labelled patches) and ``<label>_recall`` (kept labelled patches / labelled patches, pooled over the
    observations; None where no patch showed it). ``attention``, if given, receives per task the
    :func:`label_attention` of each observation (``shares``) and each label's share of the visual tokens
    (``areas``)."""
    from prismatic_tr.bench.vla.metaworld_state_use import policy_inputs
    from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
    from prismatic_tr.envs.splits import VALIDATION, split_seeds

    seeds = list(split_seeds(VALIDATION, episodes, splits=METAWORLD_SPLITS))
    rows = []
    for task in tasks:
        counts: dict[tuple[str, str], dict[str, float]] = {}
        frames = 0
        for obs, labels in observations(task, seeds):
            inputs = policy_inputs(vla, processor, obs)
            pixel_values = inputs["pixel_values"]
            frames += 1
            if attention is not None:
                attention.setdefault("shares", {}).setdefault(task, []).append(label_attention(vla, inputs, labels))
                attention.setdefault("areas", {}).setdefault(task, []).append(
                    {c: {label: float(labels[c][label].mean()) / len(CAMERAS) for label in LABELS} for c in CAMERAS})
            for spec in settings:
                patches = len(labels[CAMERAS[0]][LABELS[0]])
                kept = kept_mask(vla, pixel_values, spec, patches).reshape(len(CAMERAS), patches)
                for c, camera in enumerate(CAMERAS):
                    acc = counts.setdefault((spec, camera), {})
                    acc["kept_tokens"] = acc.get("kept_tokens", 0) + int(kept[c].sum())
                    for label in LABELS:
                        shown = labels[camera][label]
                        acc[f"{label}_patches"] = acc.get(f"{label}_patches", 0) + int(shown.sum())
                        acc[f"{label}_kept"] = acc.get(f"{label}_kept", 0) + int((shown & kept[c]).sum())
        for (spec, camera), acc in counts.items():
            row = {"setting": spec, "task": task, "camera": camera, "observations": frames,
                   "kept_tokens": acc["kept_tokens"] / frames}
            for label in LABELS:
                n = acc[f"{label}_patches"]
                row[f"{label}_patches"] = n / frames
                row[f"{label}_recall"] = round(acc[f"{label}_kept"] / n, 4) if n else None
            rows.append(row)
            print(row, flush=True)
    return rows


def pooled(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (setting, camera) over all tasks: recall pooled by labelled patches, mean kept tokens."""
    out = []
    for spec in dict.fromkeys(r["setting"] for r in rows):
        for camera in CAMERAS:
            part = [r for r in rows if r["setting"] == spec and r["camera"] == camera]
            frames = sum(r["observations"] for r in part)
            row: dict[str, Any] = {"setting": spec, "camera": camera,
                                   "kept_tokens": sum(r["kept_tokens"] * r["observations"] for r in part) / frames}
            for label in LABELS:
                shown = sum(r[f"{label}_patches"] * r["observations"] for r in part)
                kept = sum((r[f"{label}_recall"] or 0) * r[f"{label}_patches"] * r["observations"] for r in part)
                row[f"{label}_recall"] = round(kept / shown, 4) if shown else None
                row[f"{label}_patches"] = round(shown / frames, 2)
            out.append(row)
    return out


def metaworld_recall(vla_path: Path, tasks: Sequence[str], episodes: int, command: str) -> dict[str, Any]:
    """The record: per-task rows, the pooled rows, and the command, dtype and machine."""
    from prismatic_tr.bench.measure.devices import timing_meta
    from prismatic_tr.models import load_vla

    vla, processor = load_vla(vla_path)
    seen: dict[str, Any] = {}
    rows = recall_rows(vla, processor, tasks, episodes, attention=seen)
    return {**timing_meta(command, next(vla.parameters()).dtype), "vla_path": str(vla_path), "split": "validation",
            "episodes_per_task": episodes, "observations": "the first and the one halfway along the expert's episode",
            "cameras": list(CAMERAS), "labels": list(LABELS), "pooled": pooled(rows), "rows": rows,
            "attention": attention_rows(seen["shares"], seen["areas"])}


def markdown(record: dict[str, Any]) -> str:
    """The pooled table (:func:`pooled` of the record's rows): one row per setting and camera; a label's cell is its recall and, in brackets, how many of
    the camera's patches show it on average."""
    head = ["setting", "camera", "tokens kept", *(f"{label} recall (patches)" for label in LABELS)]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for r in pooled(record["rows"]):
        cells = [f"`{r['setting']}`", r["camera"], f"{r['kept_tokens']:.1f}",
                 *("-" if r[f"{label}_recall"] is None else
                   f"{100 * r[f'{label}_recall']:.0f} % ({r[f'{label}_patches']:.1f})" for label in LABELS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
