"""The policy recipe's settings (``vla_scripts/train_policy.py`` flags). The defaults follow the procedure that
made the first bundled policy (runs 5 and 6 of ``benchmarks/results/policy_training/README.md``), with the
grounding loss from stage 1's start and the policy chosen on validation episodes:

* demonstrations: 3000 episodes from seed 0, 1-5 objects, motion noise 0.2;
* a random ``policy``-preset model whose towers are pretrained for 1000 steps (seed 0);
* stage 1 (run 5's schedule): towers frozen, AdamW lr 1e-3, 200 warm-up steps, cosine schedule over 3600 steps,
  batch 32, seed 0, stopped after step 1800 with the schedule kept (``--stop_at_step``); unlike run 5 (action
  loss only), the grounding loss (weight 1.0) is on from the first step: run 5 left grounding to emerge in
  stage 2, which one remake of that procedure never did (``benchmarks/results/policy_training/
  remake_diagnosis.md``);
* stage 2 (run 6, ``--stage2.*``): from stage 1's last checkpoint, grounding loss weight 1.0, lr 1e-3, 50 warm-up
  steps, cosine over 3000 steps, seed 1, towers frozen, stopped after step 1600;
* stage 2's checkpoints (every 200 steps) each run on 50 validation episodes, the best is the policy;
* bf16 autocast where the CPU computes bf16 natively (``--bf16_autocast null``), else float32;
* closed-loop evaluation on 200 validation and 200 test episodes (:mod:`prismatic_tr.envs.splits`).

Every value is checked in ``__post_init__`` (``ValueError`` naming the flag, the value and what is allowed), the
seeds against their splits included, so a bad command line fails before any work.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prismatic_tr.cli import check_int_flag
from prismatic_tr.envs.splits import DEMONSTRATIONS, TEST, VALIDATION, check_seeds, split_seeds
from prismatic_tr.policy.bundled import UNNORM_KEY as DATASET

DEMO_FIELDS = {"num_episodes": "num_episodes", "demo_seed": "seed", "motion_noise": "motion_noise",
               "demo_min_objects": "min_objects", "demo_max_objects": "max_objects"}  # flag -> DemoConfig field


class StageSpec(Protocol):
    """What one fine-tuning stage needs (the first stage's are top-level flags, the second's ``--stage2.*``)."""

    max_steps: int
    stop_at_step: int | None
    learning_rate: float
    lr_warmup_steps: int
    seed: int
    grounding_loss_weight: float
    save_steps: int | None


def torch_cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def check_written_demos(cfg: Any, dataset: str) -> None:
    """Demonstrations already in ``<cfg.output_dir>/data`` are reused only if they are the ones ``cfg``'s flags
    write (:data:`DEMO_FIELDS`); ValueError naming the differing flags otherwise."""
    path = cfg.output_dir / "data" / dataset / "demos.json"
    if not path.is_file():
        return
    written = json.loads(path.read_text())["config"]
    differ = {flag: written.get(key) for flag, key in DEMO_FIELDS.items() if written.get(key) != getattr(cfg, flag)}
    if differ:
        raise ValueError(f"{path} holds demonstrations written with other settings ({differ}); remove "
                         f"{path.parent} or choose another --output_dir")


def check_stage(stage: StageSpec, prefix: str) -> None:
    """ValueError naming the first bad value of a stage (flags spelled ``{prefix}max_steps`` ...)."""
    def bad(name: str, allowed: str) -> ValueError:
        return ValueError(f"{prefix}{name} {getattr(stage, name)!r} is not allowed; {allowed}")

    def is_int(value: Any, low: int) -> bool:
        return not isinstance(value, bool) and isinstance(value, int) and value >= low

    for name, low in (("max_steps", 1), ("lr_warmup_steps", 0), ("seed", 0)):
        if not is_int(getattr(stage, name), low):
            raise bad(name, f"use an integer >= {low}")
    if stage.stop_at_step is not None and not (is_int(stage.stop_at_step, 1) and stage.stop_at_step <= stage.max_steps):
        raise bad("stop_at_step", f"use an integer in [1, {prefix}max_steps {stage.max_steps}] (training stops after "
                                  "that step, the schedule still spans max_steps), or null for the whole schedule")
    if stage.save_steps is not None and not is_int(stage.save_steps, 1):
        raise bad("save_steps", "use an integer >= 1, or omit it to save at the last step only")
    if not stage.learning_rate > 0:
        raise bad("learning_rate", "use a number > 0")
    if not stage.grounding_loss_weight >= 0.0:
        raise bad("grounding_loss_weight", "use a number >= 0 (0 = off)")


@dataclass
class StageConfig:
    """The second fine-tuning stage. It starts from the first stage's last checkpoint exactly as a separate
    ``train_policy.py --init_checkpoint`` command did for run 6: weights loaded from that checkpoint, a new AdamW
    (no optimizer state carried over), torch seeded with ``seed`` at its start, data order drawn from ``seed``.
    Batch size, frozen towers and bf16 autocast are the first stage's."""

    # fmt: off
    enabled: bool = True                       # false: the first stage only
    max_steps: int = 3000                      # length of the cosine schedule (optimizer steps)
    stop_at_step: int | None = 1600            # stop after this step, the schedule kept (null: all max_steps)
    learning_rate: float = 1e-3                # AdamW peak rate; cosine to 10 % at max_steps after the warm-up
    lr_warmup_steps: int = 50                  # linear warm-up steps
    seed: int = 1                              # torch seed at the stage's start and data order
    grounding_loss_weight: float = 1.0         # training-only grounding loss (prismatic_tr.policy.grounding); 0 = off
    save_steps: int | None = 200               # checkpoint interval (candidates for --select_episodes); None = last only
    # fmt: on

    def __post_init__(self) -> None:
        check_stage(self, "--stage2.")


@dataclass
class PolicyTrainConfig:
    """Remake the bundled tabletop policy on the CPU (defaults: the shipped procedure; prismatic_tr.policy.train)."""

    # fmt: off
    output_dir: Path = Path("outputs/bundled_policy")  # data/, init/, runs/, curves, evaluation.json
    num_episodes: int = 3000                   # expert demonstrations (seeds demo_seed ...)
    demo_seed: int = 0                         # first demonstration seed (demonstrations split: 0-499,999)
    motion_noise: float = 0.2                  # executed-motion noise of the demonstrations (DART-style)
    demo_min_objects: int = 1                  # objects per demonstration scene, uniform in [min, max]; fewer
    demo_max_objects: int = 5                  #   than the task's 3-5 give easy scenes that teach finding objects
    data_root: Path | None = None              # demonstrations written before (default: <output_dir>/data, written
                                               #   there when missing)
    init_checkpoint: Path | None = None        # start stage 1 from this checkpoint (an earlier run's) instead of a
                                               #   new model: preset and tower pretraining are then not used
    preset: str = "policy"                     # model size (prismatic_tr.models.PRESETS)
    vision_pretrain_steps: int = 1000          # supervised tower pretraining on rendered frames first (0 = none;
                                               #   prismatic_tr.policy.vision_pretrain), batch batch_size, seed seed
    freeze_vision: bool = True                 # fine-tune projector and Llama only (every stage)
    batch_size: int = 32                       # examples per optimizer step (every stage)
    bf16_autocast: bool | None = None          # bf16 autocast; null: where the device computes bf16 natively
                                               #   (CUDA, a CPU with avx512_bf16 / amx_bf16), else float32
    # stage 1
    seed: int = 0                              # weights, tower pretraining, torch seed and data order of stage 1
    max_steps: int = 3600                      # length of stage 1's cosine schedule (optimizer steps)
    stop_at_step: int | None = 1800            # stop stage 1 after this step, the schedule kept (null: all max_steps)
    learning_rate: float = 1e-3                # AdamW peak rate; cosine to 10 % at max_steps after the warm-up
    lr_warmup_steps: int = 200                 # linear warm-up steps
    grounding_loss_weight: float = 1.0         # training-only grounding loss in stage 1 (0 = off; runs 5 / 6: 0)
    save_steps: int | None = None              # checkpoint interval; None = at the last step only
    stage2: StageConfig = field(default_factory=StageConfig)  # the second stage (--stage2.enabled false: none)
    # choosing the policy among the last stage's checkpoints, then evaluating it
    select_episodes: int = 50                  # validation episodes per saved checkpoint of the last stage; the best
                                               #   one is the policy (0: the last step's, however it does)
    eval_episodes: int = 200                   # closed-loop episodes from the validation split (choosing)
    test_episodes: int = 200                   # closed-loop episodes from the test split (reporting only)
    eval_batch_size: int = 25                  # episodes run in lockstep
    install_dir: Path | None = None            # copy the last checkpoint and its records here
    progress: bool = True                      # progress bars
    # fmt: on

    def __post_init__(self) -> None:
        from prismatic_tr.models.config import PRESETS

        self.output_dir = Path(self.output_dir)
        if isinstance(self.stage2, dict):
            self.stage2 = StageConfig(**self.stage2)
        for name in ("num_episodes", "batch_size", "eval_episodes", "test_episodes", "eval_batch_size"):
            check_int_flag(name, getattr(self, name), 1)
        check_stage(self, "--")
        try:
            check_int_flag("select_episodes", self.select_episodes, 0)
        except ValueError as err:
            raise ValueError(f"{err} (0: keep the last step's checkpoint)") from None
        if self.preset not in PRESETS:
            raise ValueError(f"--preset {self.preset!r} is not allowed; choose one of {sorted(PRESETS)}")
        check_int_flag("vision_pretrain_steps", self.vision_pretrain_steps, 0)
        if not 1 <= self.demo_min_objects <= self.demo_max_objects <= 5:
            raise ValueError(f"--demo_min_objects {self.demo_min_objects} / --demo_max_objects {self.demo_max_objects} "
                             "are not allowed; need 1 <= min <= max <= 5")
        if not 0.0 <= self.motion_noise <= 1.0:
            raise ValueError(f"--motion_noise {self.motion_noise} is not allowed; use a number in [0, 1]")
        self._check_paths()
        self._check_seeds()

    def _check_paths(self) -> None:
        if self.data_root is not None:
            self.data_root = Path(self.data_root)
            if not (self.data_root / DATASET / "demos.json").is_file():
                raise ValueError(f"--data_root {str(self.data_root)!r} holds no {DATASET} demonstrations "
                                 f"({DATASET}/demos.json); omit it to write them into <output_dir>/data")
        else:
            check_written_demos(self, DATASET)
        if self.init_checkpoint is not None:
            self.init_checkpoint = Path(self.init_checkpoint)
            if not (self.init_checkpoint / "config.json").is_file():
                raise ValueError(f"--init_checkpoint {str(self.init_checkpoint)!r} is not a checkpoint directory "
                                 "(no config.json)")
        if self.install_dir is not None:
            self.install_dir = Path(self.install_dir)

    def _check_seeds(self) -> None:
        """Every seed the recipe draws lies in its split (prismatic_tr.envs.splits)."""
        from prismatic_tr.policy.vision_pretrain import scene_seeds

        if self.data_root is None:
            check_seeds(DEMONSTRATIONS, self.demo_seed, self.num_episodes,
                        job=f"--demo_seed {self.demo_seed} with --num_episodes {self.num_episodes}")
        if self.vision_pretrain_steps and self.init_checkpoint is None:
            scene_seeds(self.seed, self.vision_pretrain_steps, self.batch_size,
                        job=f"--seed {self.seed} with --vision_pretrain_steps {self.vision_pretrain_steps} x "
                            f"--batch_size {self.batch_size} (tower pretraining scenes)")
        split_seeds(VALIDATION, self.eval_episodes, job=f"--eval_episodes {self.eval_episodes}")
        split_seeds(TEST, self.test_episodes, job=f"--test_episodes {self.test_episodes}")

    def autocast(self) -> bool:
        """Whether the fine-tuning stages run under bf16 autocast: ``bf16_autocast``, or where it is null, whether
        this machine computes bf16 natively (CUDA, or a CPU with avx512_bf16 / amx_bf16; as ``--dtype auto``)."""
        if self.bf16_autocast is not None:
            return bool(self.bf16_autocast)
        from prismatic_tr.bench.measure.devices import cpu_has_native_bf16

        return torch_cuda_available() or cpu_has_native_bf16()

    def vision_pretrain_config(self) -> Any:
        """The tower pretraining's config (seed ``seed``, batch ``batch_size``, the demonstrations' object counts)."""
        from prismatic_tr.policy.vision_pretrain import VisionPretrainConfig

        return VisionPretrainConfig(steps=self.vision_pretrain_steps, batch_size=self.batch_size, seed=self.seed,
                                    min_objects=self.demo_min_objects, max_objects=self.demo_max_objects)

    def stages(self) -> list[tuple[str, StageSpec]]:
        """``[("stage1", self), ("stage2", self.stage2)]``, the second only when enabled."""
        return [("stage1", self)] + ([("stage2", self.stage2)] if self.stage2.enabled else [])

    def to_record(self) -> dict[str, Any]:
        """The settings as JSON-ready values (paths as strings)."""
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))
