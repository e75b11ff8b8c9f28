"""On-policy MetaWorld episodes for fine-tuning a policy under a reduction: the policy with the setting attached
(the student) drives, the same policy unreduced (the teacher) labels.

    train_metaworld_policy.py --init_oft <policy> --setting vision:diverse:0.1@0.25 --onpolicy_episodes 50

Behaviour cloning on the expert's demonstrations trains a reduced policy on the states the expert visits; under
reduction it drifts off them, and on MetaWorld a keep-0.1 fine-tune so made stayed 10 points below unreduced
(``benchmarks/results/metaworld/finetune_*``). The tabletop adapters' remedy (:mod:`prismatic_tr.policy.onpolicy`,
DAgger written for self-distillation: Ross, Gordon and Bagnell, AISTATS 2011) here: run the student in every task,
and wherever it plans a chunk record what it saw (both cameras, the state) with the teacher's whole chunk there
(``action_chunk``, which OFT training reads instead of the next actions: :mod:`prismatic_tr.data.oft`). Only the
planning steps are labelled (one in ``execute_steps``): those are the observations the student reads, and MetaWorld
draws frames only when read (:mod:`prismatic_tr.envs.metaworld.episode`), so a labelled episode costs about two
closed-loop episodes (the student's pass and the teacher's), not eight.

The episodes run in a spawned process (OSMesa and tensorflow cannot share one:
:func:`~prismatic_tr.envs.metaworld.demos.spawned_stream`) and reach the RLDS writer one at a time:
``<data_root>/metaworld_mt10/1.0.0`` in the demonstrations' layout plus ``action_chunk``, and ``onpolicy.json``
beside it (the job, per task the student's successes and the steps labelled, the wall time). Seeds come from the
demonstrations split (from ``seed``, 100,000 by default: far from the demonstrations' own seeds), the same for
every task.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from prismatic_tr.envs.rollout import EpisodeResult

ONPOLICY_SUMMARY = "onpolicy.json"   # beside the dataset's version folder, as demos.json is for demonstrations
ONPOLICY_SEED = 100_000              # first seed of every task's on-policy episodes (demonstrations split)


@dataclass(frozen=True)
class OnPolicyJob:
    """What one on-policy dataset is made of (its record in ``onpolicy.json``; the same job is not made twice)."""

    checkpoint: str                # the policy: the student (with ``setting``) and the teacher (without)
    setting: str                   # the student's reduction (prismatic_tr.vla.spec)
    tasks: tuple[str, ...]         # MetaWorld tasks, in order
    episodes_per_task: int         # episodes per task: seeds seed ... seed + episodes_per_task - 1
    seed: int                      # first seed (demonstrations split)
    chunk: int                     # the policy's chunk (the labels' length)
    image_size: int                # frames
    batch_size: int = 10           # episodes of a task in lockstep
    execute_steps: int | None = None   # chunk actions the student runs open loop per plan (null: the whole chunk)
    reduction_seed: int = 0        # seed of the student's reduction (random selections)
    threads: int = 1               # torch threads in the episode process
    teacher: str | None = None     # the policy that labels, unreduced (None: ``checkpoint`` itself; a second round
                                   #   of episodes: the first round's fine-tune drives, the original policy labels)

    def seeds(self) -> list[int]:
        return list(range(self.seed, self.seed + self.episodes_per_task))

    def identity(self) -> dict[str, Any]:
        """What the dataset depends on (``threads`` does not change an episode; the teacher is named)."""
        return {**{k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items() if k != "threads"},
                "teacher": self.teacher or self.checkpoint}


def _onpolicy_items(job: OnPolicyJob, unnorm_key: str) -> Iterator[EpisodeResult]:
    """In the spawned process: every task's relabelled episodes, in order (no tensorflow here)."""
    from prismatic_tr.envs.metaworld.episode import EpisodePool
    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.onpolicy import relabelled_oft_episodes
    from prismatic_tr.vla import reductions_attached
    from prismatic_tr.vla.spec import parse_setting

    torch.set_num_threads(job.threads)
    student, processor = load_vla(Path(job.checkpoint))
    teacher, _ = load_vla(Path(job.teacher or job.checkpoint))
    with reductions_attached(student.eval(), parse_setting(job.setting).reductions(job.reduction_seed)):
        for task in job.tasks:
            with EpisodePool(task, job.image_size) as pool:
                yield from relabelled_oft_episodes(student, teacher.eval(), processor, job.seeds(), unnorm_key,
                                                   batch_size=job.batch_size, execute_steps=job.execute_steps,
                                                   make_env=pool.episode, label_replans_only=True)


def make_onpolicy_dataset(job: OnPolicyJob, data_root: Path, dataset: str) -> dict[str, Any]:
    """Run the job's episodes and write them as the RLDS dataset ``<data_root>/<dataset>`` (``dataset``: the
    policy's unnorm key, so its statistics apply) with ``onpolicy.json``; returns that summary."""
    from prismatic_tr.envs.metaworld.demos import spawned_stream
    from prismatic_tr.envs.metaworld.tasks import STATE_DIM
    from prismatic_tr.envs.rlds import write_episodes  # imports torch, then tensorflow

    start = time.perf_counter()
    per_task: dict[str, dict[str, int]] = {}

    def episodes() -> Iterator[EpisodeResult]:
        for result in spawned_stream(_onpolicy_items, (job, dataset), "MetaWorld on-policy"):
            task = per_task.setdefault(result.kind, {"episodes": 0, "student_successes": 0, "steps": 0,
                                                      "labelled_steps": 0})
            task["episodes"] += 1
            task["student_successes"] += int(result.success)
            task["steps"] += result.steps
            task["labelled_steps"] += len(result.actions)
            yield result

    version_dir = write_episodes(data_root, dataset, {"train": episodes},
                                 f"on-policy MetaWorld episodes of {job.checkpoint} under {job.setting}, labelled by "
                                 "the policy unreduced (prismatic_tr.policy.metaworld_onpolicy)",
                                 third_person=True, chunk=job.chunk, image_size=job.image_size, state_dim=STATE_DIM)
    summary = {"job": job.identity(), "dataset_dir": str(version_dir), "tasks": per_task,
               "student_success_rate": (sum(t["student_successes"] for t in per_task.values())
                                        / max(1, sum(t["episodes"] for t in per_task.values()))),
               "labelled_steps": sum(t["labelled_steps"] for t in per_task.values()),
               "wall_s": round(time.perf_counter() - start, 1), "torch_threads": job.threads}
    (data_root / dataset / ONPOLICY_SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def check_onpolicy_data(summary: Path, job: OnPolicyJob, flag: str = "--output_dir") -> None:
    """ValueError when ``summary`` (an ``onpolicy.json``) records another job than ``job`` (a missing file is
    fine: the data is made); ``flag`` is the command's flag that places the data."""
    if summary.is_file():
        held = json.loads(summary.read_text()).get("job")
        if isinstance(held, dict) and "teacher" not in held:   # written before teachers were named: its own policy
            held = {**held, "teacher": held.get("checkpoint")}
        if held != job.identity():
            changed = sorted(k for k in job.identity() if (held or {}).get(k) != job.identity()[k])
            raise ValueError(f"{summary} records on-policy episodes made otherwise ({', '.join(changed)} differ); "
                             f"remove {summary.parent} or choose another {flag}")


def onpolicy_job(cfg: Any) -> OnPolicyJob:
    """The job of a :class:`~prismatic_tr.policy.metaworld_recipe.MetaWorldPolicyTrainConfig` with
    ``--onpolicy_episodes``: its policy (``--init_oft``) under its ``--setting``, its tasks, frames and chunk."""
    return OnPolicyJob(str(cfg.init_oft), cfg.parsed_setting.label, tuple(cfg.tasks), cfg.onpolicy_episodes,
                       cfg.onpolicy_seed, cfg.chunk, cfg.image_size, cfg.eval_batch_size, cfg.execute_steps, cfg.seed,
                       torch.get_num_threads(), str(cfg.onpolicy_teacher) if cfg.onpolicy_teacher else None)


def check_onpolicy_flags(cfg: Any, dataset: str) -> None:
    """``--onpolicy_episodes``' companions, checked before any work (ValueError naming the first bad one): a
    policy (``--init_oft``) and a setting that reduces, no ``--data_root`` or stage 2, seeds in the demonstrations
    split, a teacher that is a checkpoint, no on-policy data of another job in ``<output_dir>/data/<dataset>``, and
    earlier rounds (``--onpolicy_aggregate``) that can train beside this one (:func:`check_aggregated`)."""
    from prismatic_tr.cli import check_int_flag
    from prismatic_tr.envs.metaworld.splits import METAWORLD_SPLITS
    from prismatic_tr.envs.splits import DEMONSTRATIONS, check_seeds

    n = cfg.onpolicy_episodes
    if cfg.init_oft is None or not cfg.parsed_setting.reductions():
        raise ValueError(f"--onpolicy_episodes {n} needs --init_oft (the policy that drives and labels) and a "
                         f"--setting that reduces (got {cfg.init_oft}, {cfg.setting!r})")
    if cfg.data_root is not None or (cfg.refine.max_steps or 0) > 0:
        raise ValueError(f"--onpolicy_episodes {n} makes its own data and has no stage 2: omit --data_root and "
                         "--refine.max_steps")
    check_int_flag("onpolicy_seed", cfg.onpolicy_seed, 0)
    teacher = cfg.onpolicy_teacher
    if teacher is not None and not (Path(teacher) / "config.json").is_file():
        raise ValueError(f"--onpolicy_teacher {str(teacher)!r} is not a checkpoint directory (no config.json); give "
                         "the policy that labels, or omit it to label with --init_oft unreduced")
    check_seeds(DEMONSTRATIONS, cfg.onpolicy_seed, n,
                job=f"--onpolicy_seed {cfg.onpolicy_seed} with {n} episodes a task", splits=METAWORLD_SPLITS)
    check_onpolicy_data(Path(cfg.output_dir) / "data" / dataset / ONPOLICY_SUMMARY, onpolicy_job(cfg))
    for root in cfg.onpolicy_aggregate:
        check_aggregated(Path(root), onpolicy_job(cfg), Path(cfg.output_dir) / "data", dataset)


def check_aggregated(root: Path, job: OnPolicyJob, own_root: Path, dataset: str) -> None:
    """ValueError unless ``root`` holds a finished on-policy round (``<root>/<dataset>/onpolicy.json``) that can
    train beside ``job``'s episodes: another data root, the same tasks, chunk and frames, labelled by the same
    policy (the labels of both rounds are then one teacher's)."""
    summary = root / dataset / ONPOLICY_SUMMARY
    if root.resolve() == own_root.resolve():
        raise ValueError(f"--onpolicy_aggregate {str(root)!r} is this round's own data (<output_dir>/data); name "
                         "earlier rounds' data roots")
    if not summary.is_file():
        raise ValueError(f"--onpolicy_aggregate {str(root)!r} holds no finished on-policy round ({summary} is "
                         "missing); name the <output_dir>/data of an earlier --onpolicy_episodes run")
    held = json.loads(summary.read_text())["job"]
    mine = job.identity()
    differ = [k for k in ("tasks", "chunk", "image_size") if held.get(k) != mine[k]]
    if Path(held.get("teacher") or held["checkpoint"]).resolve() != Path(mine["teacher"]).resolve():
        differ.append(f"teacher ({held.get('teacher') or held['checkpoint']} vs {mine['teacher']})")
    if differ:
        raise ValueError(f"--onpolicy_aggregate {str(root)!r} cannot train beside this round: {', '.join(differ)} "
                         "differ")


def ensure_onpolicy_data(cfg: Any, data_root: Path, dataset: str) -> Path:
    """``data_root`` holding the on-policy dataset of ``cfg``'s job (made unless a finished one is there)."""
    if not (data_root / dataset / ONPOLICY_SUMMARY).is_file():
        make_onpolicy_dataset(onpolicy_job(cfg), data_root, dataset)
    return data_root
