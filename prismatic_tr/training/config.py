"""Fine-tuning configuration: OpenVLA's ``FinetuneConfig`` fields plus a nested token-reduction config.

Both dataclasses validate in ``__post_init__`` (ValueError naming the bad value and what is allowed), so a
bad command line fails before any model or data is touched. Checks that need the disk (dataset, vla_path)
live in :mod:`prismatic_tr.training.preflight`.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prismatic_tr.vla.settings import Setting

QUANTIZATION_BITS = (4, 8)
LR_SCHEDULES = ("constant", "cosine")
COSINE_FLOOR = 0.1  # the cosine schedule ends at this fraction of the learning rate


def lr_factor(step: int, warmup_steps: int, max_steps: int, schedule: str = "cosine") -> float:
    """Multiplier of the learning rate at optimizer step ``step`` (0-based): a linear warm-up over
    ``warmup_steps``, then constant or a cosine to ``COSINE_FLOOR`` at ``max_steps``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    span = max(1, max_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / span)
    return COSINE_FLOOR + (1 - COSINE_FLOOR) * 0.5 * (1 + math.cos(math.pi * progress))


NO_REDUCTION = ("", "none", "null")  # method words that turn the reduction off


@dataclass
class TokenReductionConfig:
    """Visual token reduction attached during fine-tuning and saved with every checkpoint
    (``vla.config.token_reduction``), so the checkpoint reloads as the policy it was trained as.

    Off by default. Naming a ``site`` or a ``method`` turns it on: ``site`` None is "projector", ``method`` None
    is the site's default (``prismatic_tr.vla.settings.DEFAULT_METHODS``); ``method`` "none" turns it off. This is
    the command line's view of a :class:`prismatic_tr.vla.settings.Setting` (its fields, names and defaults):
    :meth:`settings` builds the one Setting, which validates; after ``__post_init__`` ``site``, ``method`` and
    ``depth_fraction`` hold what runs. Site "llm" is refused (:func:`refuse_llm_site`).
    """

    # fmt: off
    spec: str | None = None                         # the whole setting in the one grammar, e.g. vision:diverse:0.1@0.25 (fills the fields below)
    site: str | None = None                         # projector | vision (llm is refused); None: projector when a method is named
    method: str | None = None                       # None: the site's default method (off when no site is named); "none": off
    keep_ratio: float = Setting.keep_ratio          # fraction of patch tokens kept
    spatial_merge_size: int = Setting.spatial_merge_size  # window side for spatial methods (projector site)
    depth_fraction: float | None = None             # vision site: fraction of the towers' blocks before the cut; None: its default
    positions: str = Setting.positions              # original (a kept token keeps its unreduced position) | compact
    num_queries: int = Setting.num_queries          # llm site only
    keep_cls_token: bool = Setting.keep_cls_token   # protect prefix tokens (CLS, registers) if the backbone emits them
    seed: int = Setting.seed                        # for random selection methods
    # fmt: on

    def __post_init__(self) -> None:
        if self.spec is not None:
            self._fill_from_spec()
        if self.method is not None and str(self.method).lower() in NO_REDUCTION:
            self.method, self.site = None, None
        settings = self.settings()  # validates every field via prismatic_tr.vla (ValueError naming the value)
        if settings is not None:
            refuse_llm_site(settings.site)
            self.site, self.method, self.depth_fraction = settings.site, settings.method, settings.depth_fraction

    def _fill_from_spec(self) -> None:
        """Take site, method, ratio, merge size, depth and positions from ``spec`` (:mod:`prismatic_tr.vla.spec`);
        ValueError for a spec that names several sites (training attaches one) or that is not a spec."""
        from prismatic_tr.vla.spec import parse_setting

        parts = parse_setting(self.spec).reductions(self.seed)
        if len(parts) > 1:
            raise ValueError(f"token_reduction.spec={self.spec!r} names {len(parts)} sites; fine-tuning attaches one")
        if not parts:
            self.method, self.site = None, None
            return
        p = parts[0]
        self.site, self.method, self.keep_ratio = p.site, p.method, p.keep_ratio
        self.depth_fraction, self.positions = p.depth_fraction, p.positions
        if p.method == "spatial_pool":
            self.spatial_merge_size = p.spatial_merge_size

    @property
    def enabled(self) -> bool:
        return self.method is not None or self.site is not None

    def settings(self) -> Any:
        """The :class:`prismatic_tr.vla.settings.Setting` for this config, or None when disabled."""
        if not self.enabled:
            return None
        return Setting.for_site(
            self.site or "projector", self.method, keep_ratio=self.keep_ratio,
            spatial_merge_size=self.spatial_merge_size, keep_cls_token=self.keep_cls_token, seed=self.seed,
            depth_fraction=self.depth_fraction, num_queries=self.num_queries, positions=self.positions,
        )

    def run_name(self) -> str:
        """The run-name part: ``tr-<method>-<ratio>`` at the projector, ``tr-<site>-<method>-d<depth>-<ratio>``
        elsewhere, ``-compact`` inserted before the ratio with compact positions."""
        parts = ["tr"] + ([] if self.site == "projector" else [str(self.site)]) + [str(self.method)]
        if self.depth_fraction is not None:
            parts.append(f"d{self.depth_fraction:g}")
        if self.positions == "compact":
            parts.append("compact")
        return "-".join(parts + [f"{self.keep_ratio}"])


def refuse_llm_site(site: str) -> None:
    """ValueError for fine-tuning with site "llm": it would train the unreduced model."""
    if site != "llm":
        return
    from prismatic_tr.vla import SITES

    others = " or ".join(repr(s) for s in SITES if s != "llm")
    raise ValueError(
        "token_reduction.site='llm' cannot be fine-tuned: the llm site prunes the visual tokens of a generation "
        "prefill only, and a training forward (labels, teacher forcing) runs every visual token, so the model would "
        f"train unreduced. Fine-tune with site {others} (they reduce in training exactly as at inference), or "
        "fine-tune without reduction and attach the llm site after loading with "
        "prismatic_tr.vla.apply_token_reduction_to_vla(vla, site='llm', ...)"
    )


# follows OpenVLA c8f03f48 vla-scripts/finetune.py FinetuneConfig (MIT, see NOTICE): field names and the run-name
# format, so OpenVLA's fine-tuning command lines carry over.
@dataclass
class FinetuneConfig:
    # fmt: off
    vla_path: str = "openvla/openvla-7b"                    # checkpoint directory (reference model or HF OpenVLA)

    # Directory paths
    data_root_dir: Path = Path("datasets/open-x-embodiment")  # holds <dataset_name>/<version>/
    dataset_name: str = "droid_wipe"                        # RLDS dataset to fine-tune on
    split: str = "train"                                    # tfds split
    aggregate_data_roots: list[Path] = field(default_factory=list)  # further roots holding <dataset_name> whose
                                                            #   steps train beside data_root_dir's (OpenVLA-OFT
                                                            #   policies: DAgger's aggregation of on-policy rounds)
    run_root_dir: Path = Path("runs")                       # run directories (checkpoints, logs) go here
    adapter_tmp_dir: Path | None = None                     # adapter weights here (default: <checkpoint>/adapter)
    resume_from: Path | None = None                         # a checkpoint directory written by this script

    # Fine-tuning parameters
    batch_size: int = 16                                    # per-process batch size
    max_steps: int = 200_000                                # optimizer steps (the length of the lr schedule)
    stop_at_step: int | None = None                         # stop after this step, the schedule kept over max_steps
                                                            #   (None: run all max_steps)
    save_steps: int = 5000                                  # checkpoint interval (optimizer steps)
    learning_rate: float = 5e-4                             # AdamW learning rate
    weight_decay: float = 0.0                               # AdamW weight decay
    lr_schedule: str = "constant"                           # constant | cosine (to 10 % of the rate at max_steps)
    lr_warmup_steps: int = 0                                # linear warm-up from 0 over these steps
    bf16_autocast: bool | None = None                       # None: on a GPU only (as OpenVLA); True: on a CPU too
    grad_accumulation_steps: int = 1                        # micro-batches per optimizer step
    image_aug: bool = False                                 # random resized crop + colour jitter
    shuffle_buffer_size: int = 100_000                      # tf.data shuffle buffer (steps)
    norm_stats_from_vla: bool = False                       # normalise actions with vla_path's own statistics for
                                                            #   dataset_name, not the data's (more data of the
                                                            #   policy's own task, e.g. make_onpolicy_data.py)
    save_latest_checkpoint_only: bool = True                # overwrite one checkpoint instead of one per save
    max_length: int | None = None                           # cut token sequences to this length (None: no cut)
    freeze_vision_backbone: bool = False                    # the towers keep their weights (Prismatic's frozen-
                                                            #   backbone stages); projector and LLM train
    seed: int = 7                                           # torch / shuffle seed (rank r uses seed + r)

    # LoRA and quantization
    use_lora: bool = True                                   # train LoRA adapters (else full fine-tuning)
    lora_rank: int = 32                                     # rank; alpha = min(rank, 16)
    lora_dropout: float = 0.0                               # dropout on the LoRA path
    use_quantization: bool = False                          # load the base weights in 4/8 bit (needs LoRA)
    quantization_bits: int = 4                              # 4 (nf4, as OpenVLA) or 8 (LLM.int8)

    # Token reduction (no reduction by default)
    token_reduction: TokenReductionConfig = field(default_factory=TokenReductionConfig)
    distill_weight: float = 0.0                             # > 0: add this x KL(unreduced vla_path || trained
                                                            #   model) at the action tokens (training/distill.py)
    distill_temperature: float = 1.0                        # softens both distributions for that KL

    # Logging
    log_every: int = 10                                     # console log interval (optimizer steps)
    use_wandb: bool = False                                 # log to Weights & Biases (imported only if True)
    wandb_project: str = "openvla"                          # W&B project
    wandb_entity: str | None = None                         # W&B entity
    run_id_note: str | None = None                          # extra note appended to the run id
    progress_bar: bool = True                               # tqdm bar on rank 0
    # fmt: on

    def __post_init__(self) -> None:
        self.data_root_dir, self.run_root_dir = Path(self.data_root_dir), Path(self.run_root_dir)
        self.aggregate_data_roots = [Path(root) for root in self.aggregate_data_roots]
        for root in self.aggregate_data_roots:
            if root.resolve() == self.data_root_dir.resolve() or not (root / self.dataset_name).is_dir():
                raise ValueError(f"aggregate_data_roots entry {str(root)!r} is not allowed; name other data roots "
                                 f"than data_root_dir, each holding {self.dataset_name}/<version>/")
        for name in ("batch_size", "max_steps", "save_steps", "grad_accumulation_steps", "lora_rank", "log_every",
                     "shuffle_buffer_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is not allowed; it must be an integer >= 1")
        if self.stop_at_step is not None and (isinstance(self.stop_at_step, bool) or not isinstance(
                self.stop_at_step, int) or not 1 <= self.stop_at_step <= self.max_steps):
            raise ValueError(f"stop_at_step={self.stop_at_step!r} is not allowed; use an integer in [1, max_steps="
                             f"{self.max_steps}] (training stops after it, the schedule still spans max_steps) or None")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be > 0")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule={self.lr_schedule!r} is not allowed; use one of {LR_SCHEDULES}")
        if isinstance(self.lr_warmup_steps, bool) or not isinstance(self.lr_warmup_steps, int) or self.lr_warmup_steps < 0:
            raise ValueError(f"lr_warmup_steps={self.lr_warmup_steps!r} is not allowed; use an integer >= 0")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout={self.lora_dropout} must be in [0, 1)")
        if self.use_quantization and not self.use_lora:
            raise ValueError(
                "use_quantization=True needs use_lora=True: quantized base weights cannot be trained directly; "
                "pass --use_lora true or drop --use_quantization"
            )
        if self.quantization_bits not in QUANTIZATION_BITS:
            raise ValueError(f"quantization_bits={self.quantization_bits} is not allowed; use one of {QUANTIZATION_BITS}")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"max_length={self.max_length} must be >= 2 or None")
        if isinstance(self.token_reduction, dict):
            self.token_reduction = TokenReductionConfig(**self.token_reduction)
        if isinstance(self.distill_weight, bool) or not self.distill_weight >= 0:
            raise ValueError(f"distill_weight={self.distill_weight!r} is not allowed; use a number >= 0 (0 = off)")
        if not self.distill_temperature > 0:
            raise ValueError(f"distill_temperature={self.distill_temperature!r} is not allowed; use a number > 0")

    @property
    def last_step(self) -> int:
        """The last optimizer step run: ``stop_at_step`` if given, else ``max_steps``."""
        return self.max_steps if self.stop_at_step is None else self.stop_at_step

    def lr_factor(self, step: int) -> float:
        """Multiplier of ``learning_rate`` at optimizer step ``step`` (0-based): warm-up, then the schedule."""
        return lr_factor(step, self.lr_warmup_steps, self.max_steps, self.lr_schedule)

    def autocast(self, device: Any) -> bool:
        """Whether forwards run under bf16 autocast on ``device``."""
        return device.type == "cuda" if self.bf16_autocast is None else bool(self.bf16_autocast)

    @property
    def lora_alpha(self) -> int:
        return min(self.lora_rank, 16)

    def exp_id(self) -> str:
        """Run name in OpenVLA's style: ``<model>+<dataset>+b<global batch>+lr-<lr>[+lora-r..][+q-4bit][+tr-<reduction>][+distill-w]``
        (:meth:`TokenReductionConfig.run_name`)."""
        parts = [Path(str(self.vla_path)).name, self.dataset_name, f"b{self.batch_size * self.grad_accumulation_steps}",
                 f"lr-{self.learning_rate}"]
        if self.use_lora:
            parts.append(f"lora-r{self.lora_rank}+dropout-{self.lora_dropout}")
        if self.use_quantization:
            parts.append(f"q-{self.quantization_bits}bit")
        if self.freeze_vision_backbone:
            parts.append("frozen-vision")
        if self.token_reduction.enabled:
            parts.append(self.token_reduction.run_name())
        if self.distill_weight > 0:
            parts.append(f"distill-{self.distill_weight:g}")
        if self.run_id_note:
            parts.append(self.run_id_note)
        return "+".join(parts)
