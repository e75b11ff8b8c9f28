"""An OpenVLA-OFT-style MetaWorld MT10 policy, one command from the demonstrations
(``vla_scripts/train_metaworld_policy.py``):

MetaWorld's scripted-expert demonstrations (:mod:`prismatic_tr.envs.metaworld.demos`, RLDS in OFT's LIBERO layout,
``episodes_per_task`` per task, or ``task_episodes`` for the tasks it names) -> an OFT model made from an
OpenVLA-style checkpoint (the bundled tabletop policy by default: its towers, projector and Llama) with a new
proprio projector and L1 head, 2 cameras (``corner3``, ``gripperPOV``), the 7-D state (effector, gripper, goal), a chunk of 8 -> AdamW on the L1 loss of the normalised chunk, towers trained too
(MetaWorld's scenes look nothing like the tabletop's) -> the saved checkpoint with the most successes on validation
episodes of every task (stage 1) -> that policy trained further on more demonstrations of the tasks it fails and
chosen again on validation (stage 2, :class:`RefineConfig`; the diagnosis that led to it:
``benchmarks/results/metaworld/diagnosis``) -> closed-loop success per task on the test seeds (held-out goals),
with Wilson intervals.

Output directory layout of a stage (and of a whole run without stage 2: ``--refine.max_steps 0``, and every
fine-tune from ``--init_oft``)::

    data/metaworld_mt10/1.0.0, demos.json   the demonstrations (unless --data_root names written ones)
    checkpoints/step_N                      every save_steps (OFT's layout, as oft_recipe writes them)
    policy/                                 a copy of the chosen checkpoint
    training_curve.csv                      loss / lr / step time per step
    evaluation.json                         settings, demonstrations, selection, success per task and split, minutes

With stage 2 the run holds ``stage1/`` and ``stage2/`` laid out so (each stage's ``evaluation.json`` without a
test), the final ``policy/`` and an ``evaluation.json`` of the whole run (both stages' records under ``stages``,
the test). A stage whose record is there, written by the same training flags, is not run again: a cut-off run
resumes where it stopped (mid-training too: :mod:`prismatic_tr.policy.train_state`).

Training reads the demonstrations with tensorflow (tf.data), and MetaWorld's OSMesa rendering cannot share a
process with it (:mod:`prismatic_tr.envs.metaworld.env`): every closed-loop evaluation runs in a spawned child
process (:func:`evaluate`, ``--eval_workers`` of them), which loads the checkpoint from disk and never imports
tensorflow.

Validation success is what the choice of checkpoint reads; test success is reported only. ``--init_oft`` and
``--setting`` fine-tune a trained MetaWorld policy with a reduction attached (as :mod:`.oft_recipe` does for the
tabletop policy): training, choice and evaluation all run with the setting attached.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prismatic_tr.cli import check_int_flag
from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
from prismatic_tr.envs.metaworld.tasks import (
    DEFAULT_IMAGE_SIZE,
    MT10,
    STATE_DIM,
    STATE_FIELDS,
    metaworld_task,
)
from prismatic_tr.envs.splits import TEST, VALIDATION, split_ranges, split_seeds
from prismatic_tr.policy.metaworld_lora import check_lora_flags, ship_adapter, train_lora, write_adapter
from prismatic_tr.policy.metaworld_onpolicy import ONPOLICY_SUMMARY, check_onpolicy_flags
from prismatic_tr.policy.metaworld_records import run_facts, two_stage_record

DATASET = "metaworld_mt10"   # the demonstrations' tfds name = the policy's unnorm_key
NUM_IMAGES = 2               # corner3 and gripperPOV
# Stage 2's demonstrations: the tasks stage 1 fails get more (more goal and object positions to read from the
# cameras: benchmarks/results/metaworld/diagnosis), the others 20 so that they are not forgotten.
REFINE_TASK_EPISODES = {"reach-v3": 80, "push-v3": 120, "pick-place-v3": 120, "peg-insert-side-v3": 60}
REFINE_STEPS = 1500          # stage 2's steps when the run trains the reference policy


@dataclass
class RefineConfig:
    """Stage 2: the policy stage 1 chose, trained on demonstrations of its own (``<output_dir>/stage2/data``) with
    more of the tasks it fails, at a lower rate; its checkpoints are chosen on validation as stage 1's are."""

    # fmt: off
    max_steps: int | None = None               # null: 1500 when the run trains the reference policy (no --init_oft,
                                               #   --setting none), 0 (no stage 2) when it fine-tunes one
    episodes_per_task: int = 20                # demonstrations per task (seeds 0, 1, ... as stage 1's)
    task_episodes: dict[str, int] = field(default_factory=lambda: dict(REFINE_TASK_EPISODES))  # per-task counts
    learning_rate: float = 2e-4                # AdamW peak rate (cosine to 10 % at max_steps after the warm-up)
    lr_warmup_steps: int = 50                  # linear warm-up steps
    save_steps: int = 500                      # checkpoint interval: the candidates
    # fmt: on


@dataclass
class MetaWorldPolicyTrainConfig:
    """Train the OFT-style MetaWorld MT10 policy (2 cameras, proprio, chunk of 8, L1 head) and evaluate it per task."""

    # fmt: off
    output_dir: Path = Path("outputs/metaworld_policy")  # data/, checkpoints/, training_curve.csv, evaluation.json
    data_root: Path | None = None              # demonstrations written before by make_metaworld_demos.py (holding
                                               #   metaworld_mt10/); default: written into <output_dir>/data
                                               #   (<output_dir>/stage1/data; stage 2 always writes its own)
    episodes_per_task: int = 50                # expert demonstrations per task (when the command writes them)
    task_episodes: dict[str, int] = field(default_factory=dict)  # per-task counts overriding episodes_per_task
                                               #   (e.g. '{reach-v3: 100}'; when the command writes them)
    tasks: list[str] = field(default_factory=lambda: list(MT10))  # tasks evaluated (the demonstrations hold MT10)
    base_policy: Path | None = None            # OpenVLA-style checkpoint it starts from (default: bundled tabletop)
    init_oft: Path | None = None               # start from this OFT policy instead (its statistics kept): fine-tuning
    setting: str = "none"                      # reduction attached in training, choice and evaluation (vla.spec)
    onpolicy_episodes: int = 0                 # with --init_oft and --setting: train on this many episodes a task
                                               #   that the policy drives with the setting attached, labelled by the
                                               #   policy unreduced (its chunk wherever the student plans one:
                                               #   prismatic_tr.policy.metaworld_onpolicy), not on demonstrations
    onpolicy_seed: int = 100000                # their first seed (demonstrations split, far from the demos' seeds)
    onpolicy_teacher: Path | None = None       # the policy that labels them, unreduced (default: --init_oft; a
                                               #   second round: --init_oft the first round's fine-tune, this the
                                               #   original policy)
    onpolicy_aggregate: list[str] = field(default_factory=list)  # earlier rounds' on-policy data (their
                                               #   <output_dir>/data) trained on beside this round's episodes
                                               #   (DAgger's aggregation), labelled by the same policy
    lora_rank: int = 0                         # > 0: with --init_oft and --setting, train LoRA adapters of this
                                               #   rank (the heads whole) and write the chosen one as an adapter
                                               #   (<output_dir>/adapter: prismatic_tr.policy.metaworld_lora); 0: the
                                               #   whole policy
    chunk: int = 8                             # actions predicted per pass
    attention: str = "causal"                  # attention over the pass (prismatic_tr.models.oft_config.ATTENTIONS)
    proprio_slots: bool = True                 # the state token is every action slot's input (ours, not OFT's:
                                               #   prismatic_tr.models.oft_config.OFTSettings.proprio_slots;
                                               #   false: OFT's zero slots, as the policies before 2026-11-27)
    freeze_vision: bool = False                # keep the towers fixed (train projector, Llama, proprio, head only)
    batch_size: int = 16                       # examples per optimizer step
    max_steps: int = 4000                      # optimizer steps (cosine schedule over them)
    learning_rate: float = 5e-4                # AdamW peak rate; cosine to 10 % at max_steps after the warm-up
    lr_warmup_steps: int = 100                 # linear warm-up steps
    seed: int = 0                              # new modules' weights, torch seed and data order
    save_steps: int = 1000                     # checkpoint interval (the candidates for --select_episodes)
    select_episodes: int = 10                  # validation episodes per task per checkpoint; the best is the policy
                                               #   (0: the last checkpoint)
    task_floor: float = 0.7                    # the choice is among checkpoints with at least this share of
                                               #   select_episodes on every task (all when none has; 0: no floor)
    test_episodes: int = 50                    # closed-loop test episodes per task (reporting only)
    execute_steps: int | None = None           # chunk actions run open loop per prediction (null: the whole chunk)
    image_size: int = DEFAULT_IMAGE_SIZE       # evaluation frames (the demonstrations' size)
    eval_batch_size: int = 10                  # episodes of a task run in lockstep
    eval_workers: int = 2                      # processes running the closed loops (torch threads split among them)
    bf16_autocast: bool | None = None          # null: where the CPU computes bf16 natively, else float32
    install_dir: Path | None = None            # also copy the chosen checkpoint and its records (training_curve.csv,
                                               #   evaluation.json, demos.json) here (the shipped policy:
                                               #   prismatic_tr/assets/metaworld_policy); a LoRA run: its adapter
                                               #   and evaluation.json (prismatic_tr/assets/adapters/<name>)
    resume: bool = True                        # continue the training state an earlier run with the same training
                                               #   flags left in output_dir, skip a stage it finished (false: afresh)
    progress: bool = True                      # progress bars
    refine: RefineConfig = field(default_factory=RefineConfig)  # stage 2 (--refine.max_steps 0: none)
    # fmt: on

    def __post_init__(self) -> None:
        from prismatic_tr.policy.oft_recipe import check_resumable, check_training_flags

        self.output_dir = Path(self.output_dir)
        if not 0 <= self.task_floor <= 1:
            raise ValueError(f"--task_floor {self.task_floor!r} is not allowed; use a share from 0 (no floor) to 1")
        for name, low in (("episodes_per_task", 1), ("batch_size", 1), ("max_steps", 1), ("lr_warmup_steps", 0),
                          ("seed", 0), ("save_steps", 1), ("select_episodes", 0), ("test_episodes", 1),
                          ("eval_batch_size", 1), ("eval_workers", 1), ("chunk", 1), ("image_size", 32)):
            check_int_flag(name, getattr(self, name), low)
        if not self.tasks or len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"--tasks {self.tasks!r} is not allowed; name each task once, from {list(MT10)}")
        for task in self.tasks:
            metaworld_task(task)
        check_training_flags(self)
        self.check_refine()
        check_lora_flags(self)
        check_int_flag("onpolicy_episodes", self.onpolicy_episodes, 0)
        if self.onpolicy_aggregate and not self.onpolicy_episodes:
            raise ValueError(f"--onpolicy_aggregate {self.onpolicy_aggregate} adds earlier rounds to a round of "
                             "on-policy episodes: give --onpolicy_episodes too")
        if self.onpolicy_episodes:
            check_onpolicy_flags(self, DATASET)
        elif self.data_root is not None:
            self.data_root = Path(self.data_root)
            if not (self.data_root / DATASET).is_dir():
                raise ValueError(f"--data_root {str(self.data_root)!r} holds no {DATASET} dataset (written by "
                                 "vla_scripts/make_metaworld_demos.py); omit it to write them into <output_dir>/data")
            check_demo_state(self.data_root / DATASET / "demos.json")
        else:
            self.demo_config()   # its own checks (seed range)
            written = self.output_dir / ("stage1" if self.refine_steps else "") / "data" / DATASET / "demos.json"
            if written.is_file():
                held = json.loads(written.read_text())["config"]
                per_task, per_named = held.get("episodes_per_task"), held.get("task_episodes") or {}
                if per_task != self.episodes_per_task or per_named != self.task_episodes:
                    raise ValueError(f"{written} holds {per_task} demonstrations per task ({per_named or 'none'} "
                                     f"named), not --episodes_per_task {self.episodes_per_task} (--task_episodes "
                                     f"{self.task_episodes or 'none'}); remove {written.parent} or choose another "
                                     "--output_dir")
                check_demo_state(written)
        if self.init_oft is not None and (Path(self.init_oft) / "config.json").is_file():
            oft = json.loads((Path(self.init_oft) / "config.json").read_text()).get("oft") or {}
            if oft.get("proprio_dim") != STATE_DIM:
                raise ValueError(f"--init_oft {str(self.init_oft)!r} takes a state of {oft.get('proprio_dim')}; "
                                 f"MetaWorld episodes give {STATE_DIM} ({', '.join(STATE_FIELDS)}): start from a "
                                 "policy trained on these demonstrations")
            if bool(oft.get("proprio_slots", False)) != self.proprio_slots:
                raise ValueError(f"--init_oft {str(self.init_oft)!r} has proprio_slots={oft.get('proprio_slots', False)}"
                                 f", not --proprio_slots {self.proprio_slots}: pass the policy's own value")
        for split, n in ((VALIDATION, self.select_episodes or 1), (TEST, self.test_episodes)):
            split_seeds(split, n, splits=METAWORLD_SPLITS)
        if self.refine_steps == 0:
            check_resumable(self)

    def check_refine(self) -> None:
        """Stage 2's flags, checked before any work (ValueError naming the first bad one)."""
        r = self.refine
        if isinstance(r, dict):
            r = self.refine = RefineConfig(**r)
        if r.max_steps is not None:
            check_int_flag("refine.max_steps", r.max_steps, 0)
        for name, low in (("episodes_per_task", 1), ("lr_warmup_steps", 0), ("save_steps", 1)):
            check_int_flag(f"refine.{name}", getattr(r, name), low)
        if not r.learning_rate > 0:
            raise ValueError(f"--refine.learning_rate {r.learning_rate!r} is not allowed; use a number > 0")
        for task, n in r.task_episodes.items():
            if task not in MT10:
                raise ValueError(f"--refine.task_episodes names {task!r}; the tasks are {list(MT10)}")
            check_int_flag(f"refine.task_episodes[{task}]", n, 1)

    @property
    def floor_successes(self) -> int:
        """``task_floor`` as validation successes of ``select_episodes`` (0.7 of 10: 7)."""
        return math.ceil(round(self.task_floor * self.select_episodes, 6))

    @property
    def refine_steps(self) -> int:
        """Stage 2's steps (0: no stage 2): ``refine.max_steps``, or by default :data:`REFINE_STEPS` when the run
        trains the reference policy and 0 when it fine-tunes one (``--init_oft``) or trains under a setting."""
        if self.refine.max_steps is not None:
            return self.refine.max_steps
        return REFINE_STEPS if self.init_oft is None and self.setting == "none" else 0

    def stage(self, number: int, init_oft: Path | None = None) -> "MetaWorldPolicyTrainConfig":
        """Stage ``number``'s own config (1 or 2; no stage 2 in it, no install), in ``<output_dir>/stage<number>``;
        stage 2 starts from ``init_oft`` (stage 1's policy) with :class:`RefineConfig`'s flags."""
        import dataclasses

        common = {"output_dir": self.output_dir / f"stage{number}", "install_dir": None,
                  "refine": dataclasses.replace(self.refine, max_steps=0)}
        if number == 1:
            return dataclasses.replace(self, **common)
        r = self.refine
        return dataclasses.replace(self, **common, init_oft=init_oft, data_root=None, onpolicy_episodes=0,
                                   episodes_per_task=r.episodes_per_task, task_episodes=dict(r.task_episodes),
                                   max_steps=self.refine_steps, learning_rate=r.learning_rate,
                                   lr_warmup_steps=r.lr_warmup_steps, save_steps=r.save_steps)

    def demo_config(self) -> Any:
        """The :class:`~prismatic_tr.envs.metaworld.demos.MetaWorldDemoConfig` of the demonstrations it writes."""
        from prismatic_tr.envs.metaworld.demos import MetaWorldDemoConfig

        return MetaWorldDemoConfig(episodes_per_task=self.episodes_per_task, task_episodes=dict(self.task_episodes),
                                   output_dir=self.output_dir / "data",
                                   dataset_name=DATASET, image_size=self.image_size, progress=self.progress)

    @property
    def num_images(self) -> int:
        return NUM_IMAGES

    def autocast(self) -> bool:
        from prismatic_tr.policy.oft_recipe import bf16_autocast

        return bf16_autocast(self)

    def settings(self) -> Any:
        """The policy's :class:`~prismatic_tr.models.oft_config.OFTSettings` (7-D state, 7-D actions)."""
        from prismatic_tr.envs.spec import ACTION_DIM
        from prismatic_tr.models.oft_config import OFTSettings

        return OFTSettings(num_images_in_input=NUM_IMAGES, num_actions_chunk=self.chunk, action_dim=ACTION_DIM,
                           proprio_dim=STATE_DIM, attention=self.attention, proprio_slots=self.proprio_slots)

    def to_record(self) -> dict[str, Any]:
        return {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}


def check_demo_state(summary: Path) -> None:
    """ValueError unless the demonstrations whose ``demos.json`` is ``summary`` hold today's state
    (:data:`~prismatic_tr.envs.metaworld.tasks.STATE_FIELDS`); a missing file is left to the reader."""
    if not summary.is_file():
        return
    fields = json.loads(summary.read_text()).get("state_fields")
    if fields != list(STATE_FIELDS):
        held = "the 4-D state written before the goal joined it" if fields is None else f"the state {fields}"
        raise ValueError(f"{summary.parent} holds {held}; policies take {list(STATE_FIELDS)}: write the "
                         "demonstrations again (vla_scripts/make_metaworld_demos.py)")


def ensure_demos(cfg: MetaWorldPolicyTrainConfig) -> Path:
    """The data root holding ``metaworld_mt10``: ``--data_root``, or ``<output_dir>/data`` (written if absent:
    demonstrations, or with ``--onpolicy_episodes`` the on-policy episodes)."""
    if cfg.data_root is not None:
        return cfg.data_root
    root = cfg.output_dir / "data"
    if cfg.onpolicy_episodes:
        from prismatic_tr.policy.metaworld_onpolicy import ensure_onpolicy_data

        return ensure_onpolicy_data(cfg, root, DATASET)
    if not (root / DATASET / "demos.json").is_file():
        from prismatic_tr.envs.metaworld.demos import make_metaworld_demos

        make_metaworld_demos(cfg.demo_config())
    return root


def evaluate(checkpoint: Path, split: str, episodes: int, cfg: MetaWorldPolicyTrainConfig,
             setting: str | None = None) -> dict[str, Any]:
    """Closed-loop success of an OFT checkpoint on the first ``episodes`` seeds of ``split`` for every task of
    ``cfg.tasks`` (``setting`` attached, default ``cfg.setting``), run by ``cfg.eval_workers`` spawned processes
    (:class:`~prismatic_tr.policy.metaworld_workers.MetaWorldWorkers`; module docstring):
    :func:`~prismatic_tr.policy.metaworld.metaworld_record` plus ``wall_s``."""
    from prismatic_tr.policy.metaworld import metaworld_record
    from prismatic_tr.policy.metaworld_workers import MetaWorldWorkers

    setting = cfg.setting if setting is None else setting
    start = time.perf_counter()
    with MetaWorldWorkers(checkpoint, cfg.eval_workers) as workers:
        outcomes = workers.run([setting], cfg.tasks, split, episodes, DATASET, cfg.image_size, cfg.eval_batch_size,
                               cfg.execute_steps, cfg.seed)[setting]
    return {**metaworld_record(outcomes, split), "episodes_per_task": episodes, "setting": setting,
            "eval_workers": cfg.eval_workers, "wall_s": time.perf_counter() - start}


def choose(cfg: MetaWorldPolicyTrainConfig, checkpoints: dict[int, Path],
           known: dict[str, dict[str, Any]] | None = None) -> tuple[Path, dict[str, Any]]:
    """The checkpoint with the most successes over ``cfg.select_episodes`` validation episodes of every task among
    those reaching ``cfg.task_floor`` on every task (all when none does; ties: the later step). ``known``:
    {checkpoint path: its score} recorded by an earlier run of these flags on the same episodes, reused, not run
    again."""
    from prismatic_tr.policy.checkpoint_choice import choose_checkpoint

    def score(checkpoint: Path) -> dict[str, Any]:
        if str(checkpoint) in (known or {}):
            return {k: v for k, v in known[str(checkpoint)].items() if k not in ("step", "checkpoint")}
        record = evaluate(checkpoint, VALIDATION, cfg.select_episodes, cfg)
        return {"mean_success_rate": record["mean_success_rate"],
                "successes": sum(t["successes"] for t in record["tasks"].values()),
                "per_task": {k: t["successes"] for k, t in record["tasks"].items()}, "wall_s": record["wall_s"]}

    return choose_checkpoint(checkpoints, cfg.select_episodes, score, "episodes_per_task", " over the tasks",
                             floor=cfg.floor_successes)


def known_scores(record: dict[str, Any] | None, cfg: MetaWorldPolicyTrainConfig) -> dict[str, dict[str, Any]]:
    """{checkpoint: score} of an earlier run's choice when it scored on the episodes ``cfg`` scores on (the same
    ``select_episodes`` of the same tasks); empty otherwise."""
    if record is None:
        return {}
    selection = record.get("selection", {})
    if selection.get("episodes_per_task") != cfg.select_episodes or record["config"].get("tasks") != cfg.tasks:
        return {}
    return {c["checkpoint"]: c for c in selection.get("candidates", []) if isinstance(c, dict) and "per_task" in c}


def chosen_rule(cfg: MetaWorldPolicyTrainConfig) -> str:
    """How ``cfg`` chooses, in words (the terminal line of a choice made again)."""
    floor = f", every task >= {cfg.floor_successes}" if cfg.floor_successes else ""
    return f"{cfg.select_episodes} validation episodes a task{floor}"


def chosen_alike(record: dict[str, Any], cfg: MetaWorldPolicyTrainConfig) -> bool:
    """Whether ``record``'s choice was made as ``cfg`` makes it (its episodes and its floor)."""
    selection = record.get("selection", {})
    if selection.get("rule") == "the last step's checkpoint":
        return cfg.select_episodes == 0 or len(record["training"]["checkpoints"]) == 1
    return (selection.get("episodes_per_task") == cfg.select_episodes
            and selection.get("task_floor", 0) == cfg.floor_successes)


def finished_stage(cfg: MetaWorldPolicyTrainConfig, test: bool) -> dict[str, Any] | None:
    """The record ``<output_dir>/evaluation.json`` of a run with ``cfg``'s training flags that got as far as this
    one goes (its test too, when ``test``) and chose as ``cfg`` chooses (:func:`chosen_alike`), or None (also with
    ``--resume false``)."""
    record = trained_stage(cfg)
    if record is None or not chosen_alike(record, cfg):
        return None
    return record if TEST in record.get("evaluation", {}) or not test else None


def trained_stage(cfg: MetaWorldPolicyTrainConfig) -> dict[str, Any] | None:
    """The record ``<output_dir>/evaluation.json`` of a finished run with ``cfg``'s training flags, however it
    chose and tested, or None (also with ``--resume false``)."""
    from prismatic_tr.policy.train_state import training_identity

    path = cfg.output_dir / "evaluation.json"
    if not cfg.resume or not path.is_file():
        return None
    record = json.loads(path.read_text())
    same = training_identity(record.get("config", {}), False) == training_identity(cfg.to_record(), False)
    return record if same else None


def run_stage(cfg: MetaWorldPolicyTrainConfig, test: bool = True) -> dict[str, Any]:
    """One training run in ``cfg.output_dir``: demonstrations, training, the choice on validation, the chosen
    checkpoint copied to ``policy/`` and, with ``test``, its test episodes; returns (and writes to
    ``evaluation.json``) what it did and measured. A run of the same flags that finished is returned as it is; one
    that finished under another choice (``--task_floor``, ``--select_episodes``) is chosen again from its recorded
    validation scores where they hold these episodes, and tested again, without training."""
    from prismatic_tr.policy.oft_recipe import CURVE, install, start_policy, train_policy

    done = finished_stage(cfg, test)
    if done is not None:
        print(f"{cfg.output_dir}: finished before (evaluation.json), not run again")
        return done
    before = trained_stage(cfg)
    cfg.output_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    aggregated = [Path(root) for root in cfg.onpolicy_aggregate]
    if before is not None:
        print(f"{cfg.output_dir}: trained before (evaluation.json), chosen again: {chosen_rule(cfg)}")
        data_root, base = Path(before["demonstrations"]["data_root"]), before["base_policy"]
        checkpoints = {int(k): Path(v) for k, v in before["training"]["checkpoints"].items()}
        last_loss, earlier = before["training"]["last_loss"], before["minutes"]
        t_demos = t_train = time.perf_counter()
    else:
        data_root = ensure_demos(cfg)
        t_demos = time.perf_counter()
        if cfg.lora_rank:
            base = cfg.init_oft
            checkpoints, history = train_lora(cfg, data_root, DATASET, cfg.output_dir / CURVE)
        else:
            vla, processor, _, base = start_policy(cfg, data_root, DATASET)
            result = train_policy(cfg, vla, processor, vla.norm_stats, data_root, DATASET, also=aggregated)
            checkpoints, history = result.checkpoints, result.history
            del vla
        last_loss, earlier = history[-1]["loss"], {}
        t_train = time.perf_counter()
    known = known_scores(before, cfg)
    checkpoint, selection = choose(cfg, checkpoints, known)
    if known:
        selection["scores_from"] = str(cfg.output_dir / "evaluation.json")   # an earlier choice's, not run again
    policy = install(checkpoint, [], cfg.output_dir / "policy")
    adapter = write_adapter(checkpoint, cfg, DATASET) if cfg.lora_rank else None
    t_select = time.perf_counter()
    evaluation = {TEST: evaluate(policy, TEST, cfg.test_episodes, cfg)} if test else {}
    demos = next((f for f in (data_root / DATASET / n for n in ("demos.json", "onpolicy.json")) if f.is_file()),
                 data_root / DATASET / "demos.json")
    record = {
        "recipe": "prismatic_tr.policy.metaworld_recipe.run_recipe (vla_scripts/train_metaworld_policy.py)",
        "config": cfg.to_record(), "base_policy": str(base), "oft_settings": asdict(cfg.settings()),
        "setting": cfg.parsed_setting.label, "seed_splits": split_ranges(METAWORLD_SPLITS),
        "demonstrations": {"data_root": str(data_root), **(json.loads(demos.read_text()) if demos.is_file() else {})},
        **({"aggregated": [{"data_root": str(root), **json.loads((root / DATASET / ONPOLICY_SUMMARY).read_text())}
                           for root in aggregated]} if aggregated else {}),
        "training": {"steps": cfg.max_steps, "last_loss": last_loss, "curve": CURVE,
                     "checkpoints": {str(k): str(v) for k, v in checkpoints.items()},
                     **({"lora_rank": cfg.lora_rank} if cfg.lora_rank else {})},
        "selection": selection, "checkpoint": str(checkpoint), "policy": str(policy),
        **({"adapter": str(adapter)} if adapter is not None else {}),
        "execute_steps": cfg.execute_steps or cfg.chunk, "evaluation": evaluation,
        "minutes": {"demonstrations": earlier.get("demonstrations", (t_demos - t0) / 60),
                    "training": earlier.get("training", (t_train - t_demos) / 60),
                    "selection": (t_select - t_train) / 60 + (earlier.get("selection", 0) if known else 0),
                    **({"evaluation_test": evaluation[TEST]["wall_s"] / 60} if test else {})},
        **run_facts(cfg),
    }
    (cfg.output_dir / "evaluation.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def run_recipe(cfg: MetaWorldPolicyTrainConfig) -> dict[str, Any]:
    """The whole recipe: one stage (``refine_steps`` 0), or stage 1, stage 2 from its policy, and the test of
    stage 2's; returns (and writes to ``<output_dir>/evaluation.json``) what it did and measured; with
    ``install_dir``, the policy and its records are copied there."""
    from prismatic_tr.policy.oft_recipe import CURVE, install

    if cfg.refine_steps == 0:
        record = run_stage(cfg)
        curves = {CURVE: cfg.output_dir / CURVE}
        demos = {"demos.json": Path(record["demonstrations"]["data_root"]) / DATASET / "demos.json"}
    else:
        first = run_stage(cfg.stage(1), test=False)
        second_cfg = cfg.stage(2, init_oft=Path(first["policy"]))
        second = run_stage(second_cfg, test=False)
        record = two_stage_record(cfg, first, second)
        policy = install(Path(second["policy"]), [], cfg.output_dir / "policy")
        before = finished_stage(cfg, test=True)   # its test reused only for this very stage-2 policy
        same = before is not None and before.get("stages", {}).get("stage2") == second
        test = before["evaluation"][TEST] if same else evaluate(policy, TEST, cfg.test_episodes, cfg)
        record["evaluation"] = {TEST: test}
        record["minutes"]["evaluation_test"] = test["wall_s"] / 60
        (cfg.output_dir / "evaluation.json").write_text(json.dumps(record, indent=2) + "\n")
        curves = {f"training_curve_stage{i}.csv": cfg.output_dir / f"stage{i}" / CURVE for i in (1, 2)}
        demos = {f"demos_stage{i}.json": Path(r["demonstrations"]["data_root"]) / DATASET / "demos.json"
                 for i, r in ((1, first), (2, second))}
    if cfg.install_dir is not None and "adapter" in record:
        ship_adapter(Path(record["adapter"]), cfg.output_dir / "evaluation.json", Path(cfg.install_dir))
    elif cfg.install_dir is not None:
        target = install(Path(record["checkpoint"]), [cfg.output_dir / "evaluation.json"], Path(cfg.install_dir))
        for name, path in {**curves, **demos}.items():
            if path.is_file():
                shutil.copy2(path, target / name)
    return record
