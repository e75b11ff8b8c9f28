"""Closed-loop evaluation of a tabletop policy under reduction settings (``vla_scripts/eval_policy.py``).

:class:`EvalPolicyConfig` is the command's configuration (checked in full before any model is loaded);
:func:`carried_setting` is the setting a checkpoint or adapter carries (``--settings own``); :func:`load_policy`
loads the policy (a checkpoint, the bundled one, an adapter merged into its base) and picks its action statistics
key (:func:`prismatic_tr.policy.bundled.unnorm_key_for`); :func:`run_eval_policy` runs every setting on the same
seeds (:func:`prismatic_tr.policy.evaluate.evaluate_settings`) and returns the records and their meta.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import dataclasses
import datetime
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from prismatic_tr.cli import BadInputError, check_int_flag
from prismatic_tr.vla.settings import DEFAULT_MERGE_SIZE, SWEEP_METHODS

OWN = "own"  # --settings own: the setting the checkpoint or adapter carries (a learned scorer included)


@dataclass
class EvalPolicyConfig:
    # fmt: off
    vla_path: str | None = None             # checkpoint directory (default: the bundled tabletop policy)
    adapter: str | None = None              # a LoRA adapter merged into it first: a shipped name or a directory
                                            #   (prismatic_tr.policy.adapters; its setting is not attached)
    episodes: int = 100                     # episodes per setting
    split: str = "validation"               # seed split of the episodes (validation | test | ...; envs.splits)
    seed: int | None = None                 # first episode seed, inside the split (default: the split's first)
    methods: list[str] = field(default_factory=lambda: list(SWEEP_METHODS))  # projector-site methods
    ratios: list[float] = field(default_factory=lambda: [0.5, 0.25, 0.1])      # fractions of tokens kept
    spatial_merge_size: list[int] = field(default_factory=lambda: [DEFAULT_MERGE_SIZE])  # spatial_pool windows
    settings: list[str] = field(default_factory=list)  # further specs (vision / llm sites, combinations); "own":
                                            #   the setting --vla_path / --adapter carries
    unnorm_key: str | None = None           # action statistics key (default: the model's only one)
    min_objects: int = 3                    # task: objects per scene (the task's default, 3-5)
    max_objects: int = 5
    batch_size: int = 25                    # episodes run in lockstep
    execute_steps: int | None = None        # an OpenVLA-OFT policy: chunk actions run open loop per prediction
                                            #   (default: the whole chunk, OFT's rule)
    timing_runs: int = 10                   # predict_action timings per setting (interleaved, batch 1)
    output_dir: Path = Path("outputs/eval_policy")  # results.csv / .json / .png
    num_threads: int = 0                    # torch threads (0: torch's default)
    progress: bool = True                   # progress bar
    # fmt: on

    def __post_init__(self) -> None:
        from prismatic_tr.envs import TaskConfig
        from prismatic_tr.envs.splits import split_seeds
        from prismatic_tr.vla.spec import build_settings, parse_setting

        for name, low in (("episodes", 1), ("batch_size", 1), ("timing_runs", 1), ("num_threads", 0)):
            check_int_flag(name, getattr(self, name), low)
        if self.execute_steps is not None:
            try:
                check_int_flag("execute_steps", self.execute_steps, 1)
            except ValueError as err:
                raise ValueError(f"{err} (at most the policy's chunk) or omit it for the whole chunk") from None
        self.seeds = list(split_seeds(self.split, self.episodes, self.seed,
                                      job=f"--split {self.split} --seed {self.seed} --episodes {self.episodes}"))
        self.output_dir = Path(self.output_dir)
        if self.output_dir.is_file():
            raise ValueError(f"--output_dir {str(self.output_dir)!r} is a file; give a directory")
        self.task = TaskConfig(min_objects=self.min_objects, max_objects=self.max_objects)
        settings = build_settings(self.methods, self.ratios, self.spatial_merge_size) if self.methods else \
            build_settings([], [1.0])
        self.setting_list = list(dict.fromkeys(settings + [carried_setting(self.vla_path, self.adapter) if s.strip() == OWN else
                                                            parse_setting(s) for s in self.settings]))
        if self.vla_path is not None:
            path = Path(self.vla_path)
            if not (path / "config.json").is_file():
                raise ValueError(f"--vla_path {self.vla_path!r} is not a checkpoint directory (no config.json)")
        else:
            from prismatic_tr.policy.bundled import bundled_policy_dir

            bundled_policy_dir()
        if self.adapter is not None:
            from prismatic_tr.policy.adapters import adapter_dir

            adapter_dir(self.adapter)

    def to_meta(self) -> dict[str, Any]:
        return {f.name: (str(getattr(self, f.name)) if isinstance(getattr(self, f.name), Path) else getattr(self, f.name))
                for f in dataclasses.fields(self)}


def carried_setting(vla_path: str | None, adapter: str | None) -> Any:
    """``--settings own``: the setting ``adapter`` (its token_reduction.json) or ``vla_path`` (its config.json)
    carries, as a :class:`~prismatic_tr.vla.spec.Setting`; ValueError when neither is given or it carries none."""
    from prismatic_tr.models.modeling import read_config_dict
    from prismatic_tr.vla import read_settings
    from prismatic_tr.vla.spec import setting_of

    if adapter is not None:
        from prismatic_tr.policy.adapters import read_adapter

        stored, source = read_adapter(adapter)[0], f"--adapter {adapter!r}"
    elif vla_path is not None and (Path(vla_path) / "config.json").is_file():
        stored, source = read_config_dict(vla_path).get("token_reduction"), f"--vla_path {vla_path!r}"
    else:
        raise ValueError(f"--settings {OWN} needs --vla_path (a checkpoint directory) or --adapter")
    try:
        return setting_of(read_settings(SimpleNamespace(token_reduction=stored)))
    except ValueError as err:
        raise ValueError(f"--settings {OWN}: {source}: {err}") from None


def load_policy(cfg: EvalPolicyConfig) -> tuple[Any, Any, str, str]:
    """(vla, processor, unnorm_key, source); :class:`BadInputError` naming the checkpoint when it cannot be
    used."""
    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.bundled import bundled_policy_dir, unnorm_key_for
    from prismatic_tr.policy.closed_loop import observing

    path = cfg.vla_path
    try:
        if cfg.adapter is not None:
            from prismatic_tr.policy.adapters import default_base, load_adapted_policy

            path = path or str(default_base(cfg.adapter))  # the bundled policy of the adapter's kind
            vla, processor = load_adapted_policy(cfg.adapter, base=path, apply_reduction=False)
            path = f"{path} + adapter {cfg.adapter}"
        else:
            path = path or str(bundled_policy_dir())
            vla, processor = load_vla(path)
        key = unnorm_key_for(vla, cfg.unnorm_key)
        chunk = observing(vla).chunk(vla)
        if cfg.execute_steps is not None and cfg.execute_steps > chunk:
            raise ValueError(f"--execute_steps {cfg.execute_steps} is more than the policy's chunk of {chunk} "
                             "action(s)")
    except (OSError, ValueError) as err:
        raise BadInputError(f"cannot use {path!r}: {err}") from None
    return vla, processor, key, path


def run_eval_policy(cfg: EvalPolicyConfig, command: str) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """Every setting of ``cfg`` on the same seeds: (records, meta for the results file, the plot's title).
    ``command``: the command line, kept in the meta. :class:`BadInputError` when the policy cannot be used."""
    from tqdm.auto import tqdm

    from prismatic_tr.bench.measure.devices import timing_meta
    from prismatic_tr.policy.evaluate import evaluate_settings

    start = time.perf_counter()
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    vla, processor, key, source = load_policy(cfg)
    seeds = cfg.seeds
    bar = tqdm(total=len(seeds) * len(cfg.setting_list), desc="episodes", disable=not cfg.progress)
    records = evaluate_settings(vla, processor, cfg.setting_list, seeds, key, cfg.task, cfg.batch_size,
                                cfg.timing_runs, on_episode=lambda label, o: bar.update(),
                                execute_steps=cfg.execute_steps)
    bar.close()
    meta = {**timing_meta(command, next(vla.parameters()).dtype), "model": source,
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
            "torch_threads": torch.get_num_threads(), "config": cfg.to_meta(), "split": cfg.split,
            "seeds": [seeds[0], seeds[-1]], "wall_s": round(time.perf_counter() - start, 1)}
    title = f"{Path(source).name}: {cfg.episodes} {cfg.split} episodes per setting (seeds {seeds[0]}-{seeds[-1]})"
    return records, meta, title
