"""What a MetaWorld recipe run records (:mod:`prismatic_tr.policy.metaworld_recipe`): where it ran, the two-stage
run's record, a checkpoint's provenance from the record beside it, and the terminal summary."""

import json
import os
from pathlib import Path
from typing import Any

import torch


def run_facts(cfg: Any) -> dict[str, Any]:
    """Where a run ran: torch's threads and version, the CPU, the cores, the autocast."""
    from prismatic_tr.bench.measure.devices import cpu_info

    return {"torch_threads": torch.get_num_threads(), "torch_version": torch.__version__,
            "machine": {"cpu": cpu_info(), "cores": os.cpu_count(), "bf16_autocast": cfg.autocast()}}


def two_stage_record(cfg: Any, first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """The whole run's record: stage 2's choice as the run's (``selection``, ``checkpoint``, ``demonstrations``,
    ``training`` with both stages' steps), both stage records under ``stages``, the minutes summed."""
    minutes = {k: first["minutes"][k] + second["minutes"][k] for k in ("demonstrations", "training", "selection")}
    return {**second, "config": cfg.to_record(), "base_policy": first["base_policy"],
            "policy": str(cfg.output_dir / "policy"),
            "training": {**second["training"], "steps": first["training"]["steps"] + second["training"]["steps"],
                         "stage_steps": [first["training"]["steps"], second["training"]["steps"]]},
            "stages": {"stage1": first, "stage2": second}, "minutes": minutes, **run_facts(cfg)}


def provenance(policy: Path) -> dict[str, Any]:
    """What trained the checkpoint at ``policy``, from its recipe's ``evaluation.json`` (``<output_dir>/policy`` or
    ``<output_dir>/checkpoints/step_N``): the setting attached in training ("none": unreduced), the policy it
    started from and the steps; ``{"trained_with": None}`` when no recipe record sits beside it."""
    policy = Path(policy)
    for record_file in (policy.parent / "evaluation.json", policy.parent.parent / "evaluation.json"):
        if record_file.is_file():
            record = json.loads(record_file.read_text())
            return {"trained_with": record.get("setting"), "started_from": record.get("base_policy"),
                    "training_steps": record.get("training", {}).get("steps"), "record": str(record_file)}
    return {"trained_with": None}


def summary_lines(record: dict[str, Any]) -> str:
    """The record's test success per task and the mean, then the minutes per stage, as terminal lines."""
    lines = []
    for split, ev in record["evaluation"].items():
        for task, r in ev["tasks"].items():
            lines.append(f"{split} {task:26s} {r['successes']:3d}/{r['episodes']:<3d} {r['success_rate']:6.1%} "
                         f"(95 % CI {r['success_ci_low']:.1%} - {r['success_ci_high']:.1%})")
        lines.append(f"{split} mean over {len(ev['tasks'])} tasks: {ev['mean_success_rate']:.1%}")
    return "\n".join([*lines, "minutes: " + ", ".join(f"{k} {v:.1f}" for k, v in record["minutes"].items())])
