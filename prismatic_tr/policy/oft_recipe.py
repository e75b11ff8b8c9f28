"""The OpenVLA-OFT-style tabletop policy, one command from the demonstration split (``vla_scripts/train_oft_policy.py``):

expert demonstrations with both cameras and the state (RLDS, OFT's LIBERO layout) -> an OFT model made from an
OpenVLA-style tabletop policy (the bundled one by default: OFT fine-tunes a trained OpenVLA) with a new proprio
projector and L1 head -> AdamW on the L1 loss of the normalised 8-step chunk -> the saved checkpoint with the most
successes on validation episodes -> closed-loop success on the validation and the test seed split.

Output directory layout::

    data/tabletop_pick_oft/1.0.0, demos.json    the demonstrations (both cameras, state) and their summary
    checkpoints/step_N                          every save_steps (OFT's layout: the VLA, action_head--,
                                                proprio_projector--, dataset_statistics.json, the processor)
    training_curve.csv                          loss / lr / step time per step
    evaluation.json                             settings, demonstrations, selection, success per seed split, minutes

Validation success is what the choice of checkpoint reads; test success is reported only.

Fine-tuning for a reduction setting (``--init_oft`` a trained OFT policy, ``--setting`` a spec such as
``vision:diverse:0.1@0.25``): the policy with the setting attached trains on ``--data_root`` (on-policy episodes
labelled with the unreduced policy's chunks, ``vla_scripts/make_onpolicy_data.py``, or the demonstrations) with the
policy's own statistics, and every checkpoint is chosen and evaluated with the setting attached.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import json
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from prismatic_tr.cli import check_int_flag
from prismatic_tr.envs.splits import DEMONSTRATIONS, TEST, VALIDATION, check_seeds, split_ranges, split_seeds
from prismatic_tr.policy.bundled import OFT_UNNORM_KEY as DATASET  # demonstrations' dataset name = unnorm_key
from prismatic_tr.policy.checkpoint_choice import choose_checkpoint
from prismatic_tr.policy.recipe_config import check_written_demos

CURVE = "training_curve.csv"


def check_resumable(cfg: Any) -> None:
    """With ``cfg.resume``, ValueError when ``<output_dir>``'s training state was left by other training flags
    (named), so the command stops before any work instead of after writing demonstrations."""
    from prismatic_tr.policy.train_state import STATE_FILE, load_train_state, training_identity

    if cfg.resume:
        load_train_state(cfg.output_dir / STATE_FILE, training_identity(cfg.to_record(), bf16_autocast(cfg)))


def check_training_flags(cfg: Any) -> None:
    """The checks an OFT recipe's config shares (this one's and the MetaWorld one's): ``attention``,
    ``execute_steps`` within ``chunk``, ``learning_rate``, ``setting`` (parsed into ``cfg.parsed_setting``) and the
    ``base_policy`` / ``init_oft`` checkpoint directories (made Paths); ValueError naming the first bad one."""
    from prismatic_tr.models.oft_config import ATTENTIONS
    from prismatic_tr.vla.spec import parse_setting

    if cfg.attention not in ATTENTIONS:
        raise ValueError(f"--attention {cfg.attention!r} is not allowed; choose one of {list(ATTENTIONS)}")
    if cfg.execute_steps is not None and (isinstance(cfg.execute_steps, bool) or
                                          not isinstance(cfg.execute_steps, int) or
                                          not 1 <= cfg.execute_steps <= cfg.chunk):
        raise ValueError(f"--execute_steps {cfg.execute_steps!r} is not allowed; use an integer in [1, --chunk "
                         f"{cfg.chunk}] or null for the whole chunk")
    if not cfg.learning_rate > 0:
        raise ValueError(f"--learning_rate {cfg.learning_rate!r} is not allowed; use a number > 0")
    cfg.parsed_setting = parse_setting(cfg.setting)
    for flag in ("base_policy", "init_oft"):
        path = getattr(cfg, flag)
        if path is not None:
            setattr(cfg, flag, Path(path))
            if not (Path(path) / "config.json").is_file():
                raise ValueError(f"--{flag} {str(path)!r} is not a checkpoint directory (no config.json)")


def bf16_autocast(cfg: Any) -> bool:
    """``cfg.bf16_autocast``, or where unset: a GPU, or a CPU that computes bfloat16 natively."""
    if cfg.bf16_autocast is not None:
        return bool(cfg.bf16_autocast)
    from prismatic_tr.bench.measure.devices import cpu_has_native_bf16

    return torch.cuda.is_available() or cpu_has_native_bf16()


@dataclass
class OFTPolicyTrainConfig:
    """Train the OFT-style tabletop policy (2 cameras, proprio, chunk of 8, L1 head) from the demonstration split."""

    # fmt: off
    output_dir: Path = Path("outputs/oft_policy")  # data/, checkpoints/, training_curve.csv, evaluation.json
    base_policy: Path | None = None            # OpenVLA-style checkpoint whose towers, projector and Llama it starts
                                               #   from (default: the bundled tabletop policy)
    init_oft: Path | None = None               # start from this OFT policy instead (its statistics kept): fine-tuning
    setting: str = "none"                      # reduction attached in training, choice and evaluation (vla.spec)
    num_episodes: int = 2000                   # expert demonstrations (seeds demo_seed ...)
    demo_seed: int = 0                         # first demonstration seed (demonstrations split: 0-499,999)
    motion_noise: float = 0.2                  # executed-motion noise of the demonstrations (DART-style)
    demo_min_objects: int = 1                  # objects per demonstration scene, uniform in [min, max]
    demo_max_objects: int = 5
    data_root: Path | None = None              # demonstrations written before (default: <output_dir>/data)
    num_images: int = 2                        # cameras: third-person (1), and the eye-in-hand one (2)
    chunk: int = 8                             # actions predicted per pass
    attention: str = "causal"                  # attention over the pass (prismatic_tr.models.oft_config.ATTENTIONS)
    freeze_vision: bool = True                 # train projector, Llama, proprio projector and head only
    batch_size: int = 16                       # examples per optimizer step
    max_steps: int = 1500                      # optimizer steps (cosine schedule over them)
    learning_rate: float = 5e-4                # AdamW peak rate; cosine to 10 % at max_steps after the warm-up
    lr_warmup_steps: int = 100                 # linear warm-up steps
    seed: int = 0                              # new modules' weights, torch seed and data order
    save_steps: int = 250                      # checkpoint interval (the candidates for --select_episodes)
    select_episodes: int = 50                  # validation episodes per checkpoint; the best is the policy (0: last)
    execute_steps: int | None = None           # chunk actions run open loop per prediction (null: the whole chunk)
    eval_episodes: int = 200                   # closed-loop episodes from the validation split
    test_episodes: int = 200                   # closed-loop episodes from the test split (reporting only)
    eval_batch_size: int = 25                  # episodes run in lockstep
    bf16_autocast: bool | None = None          # null: where the CPU computes bf16 natively, else float32
    install_dir: Path | None = None            # copy the chosen checkpoint and its records here
    resume: bool = True                        # continue the training state an earlier run with the same training
                                               #   flags left in output_dir (false: start afresh)
    progress: bool = True                      # progress bars
    # fmt: on

    def __post_init__(self) -> None:
        self.output_dir = Path(self.output_dir)
        for name, low in (("num_episodes", 1), ("demo_seed", 0), ("batch_size", 1), ("max_steps", 1),
                          ("lr_warmup_steps", 0), ("seed", 0), ("save_steps", 1), ("select_episodes", 0),
                          ("eval_episodes", 1), ("test_episodes", 1), ("eval_batch_size", 1), ("chunk", 1)):
            check_int_flag(name, getattr(self, name), low)
        if self.num_images not in (1, 2):
            raise ValueError(f"--num_images {self.num_images!r} is not allowed; use 1 (third-person) or 2 (and the "
                             "eye-in-hand camera)")
        check_training_flags(self)
        if not 1 <= self.demo_min_objects <= self.demo_max_objects <= 5:
            raise ValueError(f"--demo_min_objects {self.demo_min_objects} / --demo_max_objects {self.demo_max_objects} "
                             "are not allowed; need 1 <= min <= max <= 5")
        if not 0.0 <= self.motion_noise <= 1.0:
            raise ValueError(f"--motion_noise {self.motion_noise} is not allowed; use a number in [0, 1]")
        if self.data_root is not None:
            self.data_root = Path(self.data_root)
            if not (self.data_root / DATASET).is_dir():
                raise ValueError(f"--data_root {str(self.data_root)!r} holds no {DATASET} dataset; omit it to write "
                                 "the demonstrations into <output_dir>/data")
        else:
            check_seeds(DEMONSTRATIONS, self.demo_seed, self.num_episodes,
                        job=f"--demo_seed {self.demo_seed} with --num_episodes {self.num_episodes}")
            check_written_demos(self, DATASET)
        for split, n in ((VALIDATION, max(self.eval_episodes, self.select_episodes)), (TEST, self.test_episodes)):
            split_seeds(split, n)
        if self.install_dir is not None:
            self.install_dir = Path(self.install_dir)
        check_resumable(self)

    def autocast(self) -> bool:
        return bf16_autocast(self)

    def settings(self) -> Any:
        """The policy's :class:`~prismatic_tr.models.oft_config.OFTSettings`."""
        from prismatic_tr.envs.spec import ACTION_DIM, PROPRIO_DIM
        from prismatic_tr.models.oft_config import OFTSettings

        return OFTSettings(num_images_in_input=self.num_images, num_actions_chunk=self.chunk, action_dim=ACTION_DIM,
                           proprio_dim=PROPRIO_DIM, attention=self.attention)

    def to_record(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}

    def attached(self, vla: Any) -> Any:
        """The ``setting``'s reductions attached to ``vla`` for a block (nothing for "none")."""
        from prismatic_tr.vla import reductions_attached

        return reductions_attached(vla, self.parsed_setting.reductions(self.seed))


def batches(cfg: Any, data_root: Path, processor: Any, stats: dict[str, Any], dataset: str = DATASET,
            skip: int = 0, also: Sequence[Path] = ()) -> Any:
    """An endless iterator of collated training batches of ``dataset`` (shuffled with ``cfg.seed``; ``cfg`` has
    ``chunk``, ``num_images``, ``batch_size``, ``seed`` and ``settings()``), the first ``skip`` examples passed
    over; ``also``: further data roots holding ``dataset`` whose steps join ``data_root``'s (earlier on-policy
    rounds), normalised with the same ``stats``."""
    from torch.utils.data import DataLoader

    from prismatic_tr.data import RLDSIterableDataset
    from prismatic_tr.data.oft import OFTChunkSource, OFTChunkSources, OFTChunkTransform, OFTCollator

    source = OFTChunkSources([OFTChunkSource(root, dataset, "train", cfg.chunk, cfg.num_images)
                              for root in (data_root, *also)])
    transform = OFTChunkTransform(processor, stats[dataset], cfg.settings().normalization)
    dataset = RLDSIterableDataset(source, transform, train=True, shuffle_buffer_size=20_000, seed=cfg.seed,
                                   skip=skip)
    pad = processor.tokenizer.pad_token_id
    return iter(DataLoader(dataset, batch_size=cfg.batch_size, num_workers=0, collate_fn=OFTCollator(int(pad))))


def evaluate(checkpoint: Path, split: str, episodes: int, cfg: OFTPolicyTrainConfig) -> dict[str, Any]:
    """Closed-loop success of an OFT checkpoint on the first ``episodes`` seeds of ``split`` (plus ``wall_s``)."""
    from tqdm.auto import tqdm

    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.closed_loop import evaluation_record, run_episodes

    vla, processor = load_vla(checkpoint)
    bar = tqdm(total=episodes, desc=f"closed loop ({split})", disable=not cfg.progress)
    start = time.perf_counter()
    with cfg.attached(vla):
        outcomes = run_episodes(vla, processor, list(split_seeds(split, episodes)), DATASET,
                                batch_size=cfg.eval_batch_size, on_episode=lambda _: bar.update(),
                                execute_steps=cfg.execute_steps)
    bar.close()
    return {**evaluation_record(outcomes, split), "wall_s": time.perf_counter() - start}


def start_policy(cfg: Any, data_root: Path, dataset: str) -> tuple[Any, Any, dict[str, Any], Path]:
    """(vla, processor, statistics, base): ``cfg.init_oft`` with its own statistics (fine-tuning; ValueError when it
    has none for ``dataset``), else an OFT model made from ``cfg.base_policy`` (default: the bundled tabletop policy)
    with the statistics of ``dataset``'s demonstrations under ``data_root``."""
    from prismatic_tr.data.oft import OFTChunkSource, oft_statistics
    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.bundled import bundled_policy_dir
    from prismatic_tr.policy.oft_policy import oft_from_openvla

    if cfg.init_oft is not None:  # fine-tuning a trained OFT policy: its modules and statistics
        vla, processor = load_vla(cfg.init_oft, dtype=torch.float32)
        if dataset not in (vla.norm_stats or {}):
            raise ValueError(f"--init_oft {str(cfg.init_oft)!r} has no {dataset} statistics (keys "
                             f"{sorted(vla.norm_stats or {})}): it was not trained on these demonstrations")
        return vla, processor, vla.norm_stats, cfg.init_oft
    stats = oft_statistics(OFTChunkSource(data_root, dataset, "train", cfg.chunk, cfg.num_images), dataset)
    base = cfg.base_policy or bundled_policy_dir()
    openvla, processor = load_vla(base, dtype=torch.float32)
    vla = oft_from_openvla(openvla, cfg.settings(), seed=cfg.seed)
    vla.norm_stats = vla.config.norm_stats = stats
    return vla, processor, stats, Path(base)


def train_policy(cfg: Any, vla: Any, processor: Any, stats: dict[str, Any], data_root: Path, dataset: str,
                 also: Sequence[Path] = ()) -> Any:
    """AdamW on the L1 loss with ``cfg.parsed_setting`` attached (warm-up and cosine, a checkpoint of the VLA and
    the processor every ``cfg.save_steps`` under ``<output_dir>/checkpoints``; ``also``: see :func:`batches`); the
    curve written to ``<output_dir>/training_curve.csv``; the :class:`~prismatic_tr.policy.oft_policy.OFTTrainResult`.
    With ``cfg.resume``, a state an earlier run of the same training flags left in ``<output_dir>`` is continued
    (:mod:`prismatic_tr.policy.train_state`); the state is kept as training goes either way."""
    from prismatic_tr.policy.oft_policy import train_oft
    from prismatic_tr.policy.train import write_curve
    from prismatic_tr.policy.train_state import STATE_FILE, load_train_state, training_identity
    from prismatic_tr.training.config import lr_factor
    from prismatic_tr.vla import reductions_attached

    def save(path: Path) -> None:
        vla.save_pretrained(path)
        processor.save_pretrained(path)

    state_path, identity = cfg.output_dir / STATE_FILE, training_identity(cfg.to_record(), bf16_autocast(cfg))
    start = load_train_state(state_path, identity) if cfg.resume else None
    if start is None:
        state_path.unlink(missing_ok=True)
    torch.manual_seed(cfg.seed)
    with reductions_attached(vla, cfg.parsed_setting.reductions(cfg.seed)):
        data = batches(cfg, data_root, processor, stats, dataset,
                       skip=start["step"] * cfg.batch_size if start else 0, also=also)
        result = train_oft(vla, data, cfg.max_steps,
                           lambda step: lr_factor(step, cfg.lr_warmup_steps, cfg.max_steps), cfg.learning_rate,
                           cfg.output_dir / "checkpoints", cfg.save_steps, save, cfg.freeze_vision, bf16_autocast(cfg),
                           start=start, state_path=state_path, identity=identity)
    write_curve(result.history, cfg.output_dir / CURVE, ["step", "loss", "lr", "step_time_s"])
    return result


def choose(cfg: OFTPolicyTrainConfig, checkpoints: dict[int, Path]) -> tuple[Path, dict[str, Any]]:
    """The checkpoint with the most successes on ``cfg.select_episodes`` validation episodes (ties: the later)."""
    return choose_checkpoint(checkpoints, cfg.select_episodes, lambda c: {
        "successes": evaluate(c, VALIDATION, cfg.select_episodes, cfg)["successes"]})


def run_recipe(cfg: OFTPolicyTrainConfig) -> dict[str, Any]:
    """The whole recipe; returns (and writes to ``evaluation.json``) what it did and measured."""
    from prismatic_tr.bench.measure.devices import cpu_info
    from prismatic_tr.policy.train import ensure_demos

    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    data_root = ensure_demos(cfg, DATASET, third_person=True)
    t_demos = time.perf_counter()
    vla, processor, stats, base = start_policy(cfg, data_root, DATASET)
    result = train_policy(cfg, vla, processor, stats, data_root, DATASET)
    t_train = time.perf_counter()
    checkpoint, selection = choose(cfg, result.checkpoints)
    t_select = time.perf_counter()
    evaluation = {split: evaluate(checkpoint, split, n, cfg)
                  for split, n in ((VALIDATION, cfg.eval_episodes), (TEST, cfg.test_episodes))}
    demos = next((p for p in (data_root / DATASET / "demos.json", data_root / "onpolicy.json") if p.is_file()), None)
    record = {
        "recipe": "prismatic_tr.policy.oft_recipe.run_recipe (vla_scripts/train_oft_policy.py)",
        "config": cfg.to_record(), "base_policy": str(base), "oft_settings": asdict(cfg.settings()),
        "setting": cfg.parsed_setting.label, "seed_splits": split_ranges(),
        "demonstrations": {"data_root": str(data_root), **(json.loads(demos.read_text()) if demos else {})},
        "training": {"steps": cfg.max_steps, "last_loss": result.history[-1]["loss"], "curve": CURVE,
                     "checkpoints": {str(k): str(v) for k, v in result.checkpoints.items()}},
        "selection": selection, "checkpoint": str(checkpoint), "execute_steps": cfg.execute_steps or cfg.chunk,
        "evaluation": evaluation,
        "minutes": {"demonstrations": (t_demos - t0) / 60, "training": (t_train - t_demos) / 60,
                    "selection": (t_select - t_train) / 60,
                    **{f"evaluation_{k}": v["wall_s"] / 60 for k, v in evaluation.items()}},
        "torch_threads": torch.get_num_threads(), "torch_version": torch.__version__,
        "machine": {"cpu": cpu_info(), "cores": os.cpu_count(), "bf16_autocast": cfg.autocast()},
    }
    text = json.dumps(record, indent=2) + "\n"
    (cfg.output_dir / "evaluation.json").write_text(text)
    if cfg.install_dir is not None:
        install(checkpoint, [cfg.output_dir / CURVE, cfg.output_dir / "evaluation.json", *([demos] if demos else [])],
                cfg.install_dir)
    return json.loads(text)


def install(checkpoint: Path, records: list[Path], target: Path) -> Path:
    """Copy the checkpoint's files and the records into ``target``."""
    target.mkdir(parents=True, exist_ok=True)
    for f in sorted(checkpoint.iterdir()):
        if f.is_file():
            shutil.copy2(f, target / f.name)
    for r in records:
        shutil.copy2(r, target / r.name)
    return target
