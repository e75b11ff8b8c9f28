"""Which patches each selection keeps: object recall of every method at the ``projector`` and ``vision`` sites on the
bundled tabletop policy (``benchmarks/selection_recall.py``).

Per validation-split scene, two frames (the effector at its start, and halfway to the target object), every patch
labelled from the scene's geometry (:mod:`prismatic_tr.envs.patch_labels`); among the patches a setting keeps:
``object_recall`` (object patches kept), ``target_recall`` (the instructed object's) and ``object_share`` (kept
patches that show an object). :func:`selection_recall` also times each vision-site scorer against the backbone.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch  # torch before tensorflow

from prismatic_tr.envs.env import TabletopEnv
from prismatic_tr.envs.patch_labels import COLOR_IDS, patch_labels
from prismatic_tr.envs.scene import TaskConfig
from prismatic_tr.envs.splits import VALIDATION, split_seeds
from prismatic_tr.models.tokenizer import build_prompt
from prismatic_tr.policy.bundled import load_bundled_policy
from prismatic_tr.reducers import get_strategy
from prismatic_tr.reducers.config import ReducerConfig
from prismatic_tr.vit.shared import SCORINGS, patch_scores, reduction_block
from prismatic_tr.vla import apply_token_reduction_to_vla, reduction_call, remove_token_reduction

PROJECTOR_METHODS = ("random", "topk_magnitude", "attention_score", "saliency", "diverse", "salient_diverse")
VISION_METHODS = ("random", "attention", "norm", "saliency", "diverse", "salient_diverse")
KEEPS = (0.5, 0.25, 0.1)
DEPTH = 0.25


def frames(seeds: list[int], config: TaskConfig) -> tuple[list[np.ndarray], list[str], np.ndarray, np.ndarray]:
    """Two frames per scene: images, prompts, (F, 256) bool object masks, (F, 256) bool target masks."""
    images, prompts, objects, targets = [], [], [], []
    for seed in seeds:
        env = TabletopEnv(seed, config)
        scene = env.scene
        target = scene.target_object
        start = np.asarray(scene.start)
        for frac in (0.0, 0.5):
            effector = tuple(start + frac * (np.asarray([target.x, target.y, start[2]]) - start))
            images.append(env._renderer.render(effector, gripper_open=True))
            prompts.append(build_prompt(scene.instruction))
            labels = patch_labels(scene, effector)
            objects.append(labels.color > 0)
            targets.append(labels.color == COLOR_IDS[target.color])
    return images, prompts, np.stack(objects), np.stack(targets)


def kept_patches(vla: torch.nn.Module, pixel_values: torch.Tensor, site: str, method: str, keep: float) -> np.ndarray:
    """(F, 256) bool: the patches ``site``/``method`` keeps at ``keep`` (positions among the unreduced ones)."""
    depth = DEPTH if site == "vision" else None
    apply_token_reduction_to_vla(vla, method, keep, site=site, depth_fraction=depth)
    try:
        with torch.no_grad(), reduction_call(vla) as call:
            vla.vision_backbone(pixel_values)
        kept = call.kept
    finally:
        remove_token_reduction(vla)
    mask = np.zeros((kept.shape[0], 256), dtype=bool)
    np.put_along_axis(mask, kept.numpy(), True, axis=1)
    return mask


def recall_row(site: str, method: str, keep: float, kept: np.ndarray, objects: np.ndarray,
               targets: np.ndarray) -> dict:
    return {"site": site, "method": method, "keep": keep,
            "object_recall": round(float((kept & objects).sum() / objects.sum()), 4),
            "target_recall": round(float((kept & targets).sum() / targets.sum()), 4),
            "object_share": round(float((kept & objects).sum() / kept.sum()), 4)}


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def scorer_costs(vla: torch.nn.Module, pixel_values: torch.Tensor, runs: int) -> dict:
    """Median ms of each vision-site scorer on the cut block's output of one frame, beside the backbone's."""
    tower = vla.vision_backbone.featurizer
    block = reduction_block(len(tower.blocks), DEPTH)
    px = pixel_values[:1]
    captured = {}
    hook = tower.blocks[block].register_forward_hook(lambda m, a, out: captured.__setitem__("x", out))
    with torch.no_grad():
        vla.vision_backbone(px)
        hook.remove()
        x = captured["x"]
        out = {"backbone_ms": median_ms(lambda: vla.vision_backbone(px), runs)}
        for method in VISION_METHODS:
            scoring = method if method in SCORINGS else ReducerConfig(method=method, keep_ratio=0.25)
            key = torch.zeros((), dtype=torch.int64) if method == "random" else None
            out[f"{method}_ms"] = median_ms(lambda s=scoring, k=key: patch_scores(tower, block, x, s, k), runs)
    return {k: round(v, 3) for k, v in out.items()}


def selection_recall(scenes: int, objects: int | None, timing_runs: int, command: str) -> dict:
    """The record: every site x method x keep's recall row over ``scenes`` validation scenes (``objects`` per
    scene, default the task's 3-5) and the scorers' median cost over ``timing_runs`` calls; the command, dtype and
    machine (:func:`~prismatic_tr.bench.measure.devices.timing_meta`) kept in it."""
    config = TaskConfig() if objects is None else TaskConfig(objects, objects)
    vla, processor = load_bundled_policy()
    seeds = list(split_seeds(VALIDATION, scenes))
    images, prompts, object_masks, targets = frames(seeds, config)
    pixel_values = processor(prompts, images)["pixel_values"]
    rows = []
    for site, methods in (("projector", PROJECTOR_METHODS), ("vision", VISION_METHODS)):
        for method in methods:
            get_strategy(method) if method not in SCORINGS else None  # a typo fails here, before the work
            for keep in KEEPS:
                rows.append(recall_row(site, method, keep, kept_patches(vla, pixel_values, site, method, keep),
                                       object_masks, targets))
                print(rows[-1], flush=True)
    from prismatic_tr.bench.measure.devices import timing_meta

    return {**timing_meta(command, next(vla.parameters()).dtype), "split": VALIDATION, "seeds": [seeds[0], seeds[-1]],
            "frames": len(images),
            "object_area": round(float(object_masks.mean()), 4), "target_area": round(float(targets.mean()), 4),
            "vision_depth_fraction": DEPTH, "rows": rows,
            "scorer_cost": scorer_costs(vla, pixel_values, timing_runs)}
