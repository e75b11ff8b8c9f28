"""On-policy episodes for fine-tuning under reduction, written as an RLDS dataset (``vla_scripts/make_onpolicy_data.py``).

:class:`OnPolicyConfig` is the command's configuration; :func:`make_onpolicy_data` loads the policy twice (the
student with the setting attached, the teacher unreduced), runs the episodes
(:func:`prismatic_tr.policy.onpolicy.relabelled_episodes`, or ``relabelled_oft_episodes`` for an OpenVLA-OFT
policy), writes the dataset (:func:`prismatic_tr.envs.rlds.write_episodes`) and returns its summary.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch  # noqa: F401  (torch before tensorflow, always)

from prismatic_tr.cli import BadInputError, check_int_flag


@dataclass
class OnPolicyConfig:
    # fmt: off
    setting: str = "vision:diverse:0.1@0.25"  # the student's reduction (prismatic_tr.vla.spec)
    num_episodes: int = 1000                # episodes (seeds seed ... seed + num_episodes - 1)
    seed: int = 3000                        # first seed, in the demonstrations split (0-499,999)
    vla_path: str | None = None             # the policy (default: the bundled one); the teacher is it unreduced
    output_dir: Path = Path("outputs/onpolicy")  # writes <output_dir>/<dataset_name>/1.0.0
    dataset_name: str | None = None         # default: the policy's dataset key, so its action statistics carry over
    execute_steps: int | None = None        # an OFT student: chunk actions run open loop per prediction (null: all)
    min_objects: int = 1                    # objects per scene (the demonstrations' 1-5)
    max_objects: int = 5
    batch_size: int = 25                    # episodes in lockstep
    num_threads: int = 0                    # torch threads (0: torch's default)
    # fmt: on

    def __post_init__(self) -> None:
        from prismatic_tr.envs import TaskConfig
        from prismatic_tr.envs.splits import DEMONSTRATIONS, check_seeds
        from prismatic_tr.vla.spec import parse_setting

        for name, low in (("num_episodes", 1), ("seed", 0), ("batch_size", 1), ("num_threads", 0)):
            check_int_flag(name, getattr(self, name), low)
        check_seeds(DEMONSTRATIONS, self.seed, self.num_episodes,
                    job=f"--seed {self.seed} with {self.num_episodes} episodes")
        self.parsed = parse_setting(self.setting)
        if not self.parsed.reductions():
            raise ValueError(f"--setting {self.setting!r} reduces nothing; the student needs a reduction")
        self.task = TaskConfig(min_objects=self.min_objects, max_objects=self.max_objects)
        if self.execute_steps is not None:
            try:
                check_int_flag("execute_steps", self.execute_steps, 1)
            except ValueError as err:
                raise ValueError(f"{err} or null") from None
        self.output_dir = Path(self.output_dir)
        if self.output_dir.exists() and any(self.output_dir.iterdir()):
            raise ValueError(f"--output_dir {str(self.output_dir)!r} is not empty; choose another one")
        if self.vla_path is not None and not (Path(self.vla_path) / "config.json").is_file():
            raise ValueError(f"--vla_path {self.vla_path!r} is not a checkpoint directory (no config.json)")


def make_onpolicy_data(cfg: OnPolicyConfig, command: str) -> tuple[Path, dict[str, Any]]:
    """Run the episodes and write the dataset: (its directory, the summary for ``onpolicy.json``).
    :class:`~prismatic_tr.cli.BadInputError` when ``--execute_steps`` does not fit the policy (before any episode).
    ``command``: kept in the summary."""
    from prismatic_tr.envs.rlds import write_episodes
    from prismatic_tr.models import load_vla
    from prismatic_tr.models.family import family_of
    from prismatic_tr.policy.bundled import bundled_policy_dir, unnorm_key_for
    from prismatic_tr.policy.onpolicy import relabelled_episodes, relabelled_oft_episodes
    from prismatic_tr.vla import reductions_attached

    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    start = time.perf_counter()
    path = cfg.vla_path or str(bundled_policy_dir())
    student, processor = load_vla(path)
    teacher, _ = load_vla(path)
    key = unnorm_key_for(student)
    oft = family_of(student).chunked
    if cfg.execute_steps is not None and (not oft or cfg.execute_steps > student.oft.num_actions_chunk):
        raise BadInputError(f"--execute_steps {cfg.execute_steps} needs an OFT policy with a chunk at least that long")
    seeds = range(cfg.seed, cfg.seed + cfg.num_episodes)
    outcomes: list[tuple[int, str, int]] = []

    def episodes():
        relabel = (lambda *a: relabelled_oft_episodes(*a, execute_steps=cfg.execute_steps)) if oft else \
            relabelled_episodes
        for result in relabel(student.eval(), teacher.eval(), processor, seeds, key, cfg.task, cfg.batch_size):
            outcomes.append((result.seed, result.outcome, result.steps))
            yield result

    with reductions_attached(student, cfg.parsed.reductions()):
        out = write_episodes(cfg.output_dir, cfg.dataset_name or key, {"train": episodes},
                             description=f"on-policy episodes of {path} under {cfg.setting}, teacher-labelled",
                             third_person=oft, chunk=student.oft.num_actions_chunk if oft else None)
    summary = {"command": command,
               "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
               "policy": path, "seeds": [seeds[0], seeds[-1]],
               "student_successes": sum(o == "success" for _, o, _ in outcomes),
               "episodes": len(outcomes), "steps": sum(s for _, _, s in outcomes),
               "wall_s": round(time.perf_counter() - start, 1)}
    return out, summary
