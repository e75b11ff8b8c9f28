"""On-policy episodes for fine-tuning under reduction, as an RLDS dataset (``prismatic_tr.policy.onpolicy``).

The policy with ``--setting`` attached (the student) runs ``--num_episodes`` episodes of the task; every step
records the image it saw and the action the same policy takes there unreduced (the teacher). The result is a
dataset like ``make_demos.py``'s, read by ``vla_scripts/finetune.py --data_root_dir <output_dir>``:

    python vla_scripts/make_onpolicy_data.py --setting vision:diverse:0.1@0.25 --num_episodes 1000 \\
        --output_dir outputs/onpolicy

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
    dataset_name: str = "tabletop_pick"     # keep the policy's dataset key, so its action statistics carry over
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
        self.output_dir = Path(self.output_dir)
        if (self.output_dir / self.dataset_name).exists():
            raise ValueError(f"{self.output_dir / self.dataset_name} exists; choose another --output_dir")
        if self.vla_path is not None and not (Path(self.vla_path) / "config.json").is_file():
            raise ValueError(f"--vla_path {self.vla_path!r} is not a checkpoint directory (no config.json)")


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_config_or_exit(OnPolicyConfig, argv, PROG, description=__doc__)
    from prismatic_tr.envs.rlds import write_episodes
    from prismatic_tr.models import load_vla
    from prismatic_tr.policy.bundled import UNNORM_KEY, bundled_policy_dir
    from prismatic_tr.policy.onpolicy import relabelled_episodes
    from prismatic_tr.vla import reductions_attached

    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    start = time.perf_counter()
    path = cfg.vla_path or str(bundled_policy_dir())
    student, processor = load_vla(path)
    teacher, _ = load_vla(path)
    seeds = range(cfg.seed, cfg.seed + cfg.num_episodes)
    outcomes: list[tuple[int, str, int]] = []

    def episodes():
        for result in relabelled_episodes(student.eval(), teacher.eval(), processor, seeds, UNNORM_KEY, cfg.task,
                                          cfg.batch_size):
            outcomes.append((result.seed, result.outcome, result.steps))
            yield result

    with reductions_attached(student, cfg.parsed.reductions()):
        out = write_episodes(cfg.output_dir, cfg.dataset_name, {"train": episodes},
                             description=f"on-policy episodes of {path} under {cfg.setting}, teacher-labelled")
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
