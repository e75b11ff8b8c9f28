"""On-policy episodes for fine-tuning under reduction, as an RLDS dataset (``prismatic_tr.policy.onpolicy``).

The policy with ``--setting`` attached (the student) runs ``--num_episodes`` episodes of the task; every step
records the image it saw and the action the same policy takes there unreduced (the teacher). The result is a
dataset like ``make_demos.py``'s, read by ``vla_scripts/finetune.py --data_root_dir <output_dir>``:

    python vla_scripts/make_onpolicy_data.py --setting vision:diverse:0.1@0.25 --num_episodes 1000 \\
        --output_dir outputs/onpolicy

An OpenVLA-OFT policy (``--vla_path`` an OFT checkpoint) acts as in the closed loop (chunks, ``--execute_steps`` of
each open loop) and every step is labelled with the teacher's whole chunk, both cameras and the state recorded
(``prismatic_tr.policy.onpolicy.relabelled_oft_episodes``); ``vla_scripts/train_oft_policy.py --init_oft`` trains on it.

Seeds come from the demonstrations split (default: 3000 on, after the recipe's 3000 demonstrations), scenes from
the demonstrations' distribution (1-5 objects). Writes ``<output_dir>/<dataset_name>/1.0.0`` and ``onpolicy.json``
(config, seeds, the student's success while collecting, steps). Bad flags exit with status 2 before any work.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch  # noqa: F401  (torch before tensorflow, always)

from prismatic_tr.cli import parse_config_or_exit

PROG = "make_onpolicy_data.py"


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
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"--{name} {value!r} is not allowed; use an integer >= {low}")
        check_seeds(DEMONSTRATIONS, self.seed, self.num_episodes,
                    job=f"--seed {self.seed} with {self.num_episodes} episodes")
        self.parsed = parse_setting(self.setting)
        if not self.parsed.reductions():
            raise ValueError(f"--setting {self.setting!r} reduces nothing; the student needs a reduction")
        self.task = TaskConfig(min_objects=self.min_objects, max_objects=self.max_objects)
        if self.execute_steps is not None and (isinstance(self.execute_steps, bool) or
                                               not isinstance(self.execute_steps, int) or self.execute_steps < 1):
            raise ValueError(f"--execute_steps {self.execute_steps!r} is not allowed; use an integer >= 1 or null")
        self.output_dir = Path(self.output_dir)
        if self.output_dir.exists() and any(self.output_dir.iterdir()):
            raise ValueError(f"--output_dir {str(self.output_dir)!r} is not empty; choose another one")
        if self.vla_path is not None and not (Path(self.vla_path) / "config.json").is_file():
            raise ValueError(f"--vla_path {self.vla_path!r} is not a checkpoint directory (no config.json)")


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_config_or_exit(OnPolicyConfig, argv, PROG, description=__doc__)
    from prismatic_tr.bench.vla.oft_step import is_oft
    from prismatic_tr.envs.rlds import write_episodes
    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.bundled import UNNORM_KEY, bundled_policy_dir
    from prismatic_tr.policy.onpolicy import relabelled_episodes, relabelled_oft_episodes
    from prismatic_tr.vla import reductions_attached

    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    start = time.perf_counter()
    path = cfg.vla_path or str(bundled_policy_dir())
    student, processor = load_vla(path)
    teacher, _ = load_vla(path)
    keys = sorted(student.norm_stats or {})
    key = UNNORM_KEY if UNNORM_KEY in keys else keys[0]
    oft = is_oft(student)
    if cfg.execute_steps is not None and (not oft or cfg.execute_steps > student.oft.num_actions_chunk):
        print(f"{PROG}: error: --execute_steps {cfg.execute_steps} needs an OFT policy with a chunk at least that long",
              file=sys.stderr)
        return 2
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
    successes = sum(o == "success" for _, o, _ in outcomes)
    summary = {"command": " ".join(["python", "vla_scripts/make_onpolicy_data.py", *sys.argv[1:]]),
               "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()},
               "policy": path, "seeds": [seeds[0], seeds[-1]], "student_successes": successes,
               "episodes": len(outcomes), "steps": sum(s for _, _, s in outcomes),
               "wall_s": round(time.perf_counter() - start, 1)}
    (cfg.output_dir / "onpolicy.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {out}: {len(outcomes)} episodes, {summary['steps']} steps; the student succeeded in "
          f"{successes} while collecting; {summary['wall_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
