"""The policy-step benchmark's configuration: the ``main`` and ``full`` profiles and :class:`BenchmarkConfig`,
validated before any model is built (``ValueError`` naming the bad value and what is allowed).

The command is ``vla_scripts/benchmark.py`` (entry point ``prismatic-tr-benchmark``); the job itself is
:func:`prismatic_tr.bench.vla.job.run_benchmark`.

No ``from __future__ import annotations`` here: draccus 0.8 (OpenVLA's pins) needs the field types as objects.
"""

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from prismatic_tr.bench.measure.devices import fast_dtype, resolve_device
from prismatic_tr.bench.measure.devices import resolve_dtype as _resolve_dtype
from prismatic_tr.cli import check_int_flag
from prismatic_tr.vla.settings import DEFAULT_MERGE_SIZE, DEFAULT_METHODS

# --full's projector methods: the default, then every other registered reducer (the selections measured since and
# the seed design's four).
FULL_METHODS = list(dict.fromkeys([DEFAULT_METHODS["projector"], "diverse", "salient_diverse", "diverse_merge",
                                   "pair_merge", "saliency", "topk_magnitude", "attention_score", "random",
                                   "spatial_pool"]))
_PROJ, _VIS = DEFAULT_METHODS["projector"], DEFAULT_METHODS["vision"]
# The main job: what a user needs to decide, within 10 minutes on 2 cores of either CPU kind, install included: the
# default selection at keep 0.1 at each site where a shipped adapter wins the success back, the training-free keep
# 0.25 inside the towers, and the llm site. Projector keep 0.25 (training-free; on the CPU slower than vision keep
# 0.25 in every committed run, with success within 2 points: benchmarks/results/policy, oft, metaworld/table), the
# renumbered positions (`:compact`), random and the seed design's scorers are in --full and benchmarks/results/.
MAIN_SETTINGS = [
    f"{_PROJ}:0.1",
    f"vision:{_VIS}:0.25@0.25", f"vision:{_VIS}:0.1@0.25",
    "llm:attention:0.5@0.25",
]
# --full: reduction inside the vision towers and inside the language model (see prismatic_tr.vla.spec).
FULL_SITE_SETTINGS = [
    "spatial_pool:4x4",
    *(f"vision:{m}:{k}@0.25" for m in dict.fromkeys((_VIS, "diverse", "diverse_merge_keys", "salient_diverse",
                                                       "saliency", "norm", "attention", "random"))
      for k in (0.5, 0.25, 0.1)),
    f"vision:{_VIS}:0.25@0.5", f"vision:{_VIS}:0.25@0.1",
    "llm:attention:0.5@0.25", "llm:attention:0.25@0.25",
    # a merging method weighs its merged tokens in the LLM's attention, which the llm site's cut would drop: the
    # two sites combine with a selecting method only
    "vision:diverse:0.25@0.25+llm:attention:0.5@0.25", "vision:diverse:0.25@0.1+llm:attention:0.5@0.125",
]
# The shipped LoRA adapters (prismatic_tr/assets/adapters) for the main job's keep-0.1 settings, each run under its
# own setting beside that setting training-free; the LoRA is merged into the weights, so a step with an adapter is
# its setting's step (not timed).
SHIPPED_ADAPTERS = [f"vision-{_VIS}-0.1-0.25", f"projector-{_PROJ}-0.1"]
# The OpenVLA-OFT twin of each preset (its towers and LLM, 2 images, proprio, one pass) that ``--oft`` times after
# the preset's own rows; the main job (no --preset) times cpu-bench-oft.
OFT_TWINS = {None: "cpu-bench-oft", "cpu-bench": "cpu-bench-oft", "tiny": "tiny-oft", "openvla-7b": "openvla-oft-7b"}
# The main job's OpenVLA-OFT row: keep 0.1 inside the towers (the shipped OFT adapter's site), where OFT's one pass
# turns fewer tokens into the most speed. An AVX2-only CPU runs both models in float32, OFT's unreduced step is the
# job's longest and every row costs 7 passes (prismatic_tr.bench.vla.benchmark), so the main job times this one;
# benchmarks/results/oft times every main setting, the projector and llm sites included.
OFT_MAIN_SETTINGS = [f"vision:{_VIS}:0.1@0.25"]
# Each profile's values for the flags a user leaves unset. The main job's budget (10 minutes on 2 cores): 3 timed
# rounds, 50 test episodes to report and 20 validation episodes to choose the best setting, per row (a Wilson 95 %
# interval on 20 episodes at 90 % success is 70-97 %: the choice is coarse, and it says so; --full runs 100).
PROFILES: dict[str, dict[str, Any]] = {
    "main": {"methods": [], "ratios": [0.5, 0.25, 0.1], "settings": MAIN_SETTINGS, "policy_episodes": 50,
             "validation_episodes": 20, "adapters": SHIPPED_ADAPTERS, "num_runs": 3, "warmup": 0},
    "full": {"methods": FULL_METHODS, "ratios": [0.5, 0.25, 0.1], "settings": FULL_SITE_SETTINGS,
             "policy_episodes": 100, "validation_episodes": 100, "adapters": SHIPPED_ADAPTERS, "num_runs": 10,
             "warmup": 2},
}


def compact_twins(methods: list[str], ratios: list[float], specs: list[str]) -> list[str]:
    """The ``:compact`` spec of every projector method x ratio and every single-site vision spec (the sites whose
    position rule can be switched); ``spatial_pool`` at its merge sizes 2 and 4."""
    twins = []
    for m in methods:
        amounts = [f"{s}x{s}" for s in (2, 4)] if m == "spatial_pool" else [f"{r:g}" for r in ratios]
        twins += [f"{m}:{a}:compact" for a in amounts]
    twins += [f"{spec}:compact" for spec in specs if "+" not in spec and not spec.startswith("llm:")
              and not spec.startswith("spatial_pool")]
    return list(dict.fromkeys(twins))


@dataclass
class BenchmarkConfig:
    # fmt: off
    full: bool = False                         # the full sweep (module docstring) instead of the main job's few settings
    preset: str | None = None                  # reference model: tiny | cpu-bench | openvla-7b | tiny-oft | cpu-bench-oft | openvla-oft-7b (OpenVLA-OFT: 2 images, proprio, one pass; default: cpu-bench on CPU, openvla-7b on GPU)
    vision_backbone_id: str = "dinosiglip-vit-so-224px"  # dinosiglip-vit-so-224px | siglip-vit-so400m
    vla_path: str | None = None                # checkpoint directory to load instead of the random reference model
    methods: list[str] | None = None           # projector-site methods x --ratios (default: the profile's; main: none)
    ratios: list[float] | None = None          # fractions of visual tokens kept (default: 0.5 0.25 0.1)
    spatial_merge_size: int = DEFAULT_MERGE_SIZE  # spatial_pool window (keeps 1 / size**2 of the tokens)
    settings: list[str] | None = None          # further specs: any site, ':compact' positions (default: the profile's)
    policy_episodes: int | None = None         # closed-loop episodes of the bundled policy per setting (0: none; main 50, full 100)
    policy_split: str = "test"                 # seed split of those episodes (test: held out, reported)
    validation_episodes: int | None = None     # episodes per setting of the validation split, which choose the best setting (0: none; main 30, full 100)
    adapters: list[str] | None = None          # shipped adapters (or adapter directories) run under their own setting (default: both shipped; "[]": none)
    num_runs: int | None = None                # timed rounds, every setting once per round, interleaved (main 5, full 10)
    warmup: int | None = None                  # untimed predict_action rounds first (main 0: each setting's MACs pass warms it; full 2)
    batch_size: int = 1                        # images (same instruction) per step
    dtype: str = "auto"                        # auto (bfloat16 on GPU and on CPUs with native bf16, else float32) | bfloat16 | float16 | float32
    device: str = "auto"                       # auto (cuda if available, else cpu) | cpu | cuda | cuda:N
    output_dir: Path = Path("outputs/benchmark")  # where results.csv / .json / .png go
    seed: int = 0                              # model weights, synthetic image, random strategy
    num_threads: int = 0                       # CPU threads for torch (0 = torch's default, one per core)
    instruction: str = "pick up the red block"  # the task text of the prompt
    unnorm_key: str | None = None              # norm_stats key for un-normalising actions (default: the first)
    progress: bool = True                      # one progress bar over the whole job, with the time left
    strict: bool = False                       # exit with status 3 when a row is flagged as noisy
    compile: bool = False                      # torch.compile every tower block, the projector and each LLM layer (hooks stay eager; needs --warmup >= 1)
    freeze: bool = False                       # with --compile: inductor's freezing (weights folded and pre-packed once; inference only)
    oft: bool | None = None                    # then time the preset's OpenVLA-OFT twin (cpu-bench-oft; tiny-oft for tiny; openvla-oft-7b for openvla-7b) with the same settings into <output_dir>/oft (null: in the main job only, i.e. none of --full, --preset, --vla_path, --methods, --settings)
    # fmt: on

    def oft_rows(self) -> bool:
        """Whether the job goes on to time the preset's OpenVLA-OFT twin (:meth:`for_oft`) after its own rows."""
        if self.oft is not None:
            return bool(self.oft)
        return (not self.full and self.preset is None and self.vla_path is None and self.settings == MAIN_SETTINGS
                and not self.methods)

    def for_oft(self) -> "BenchmarkConfig":
        """This job's rounds, dtype and threads on the preset's OFT twin (:data:`OFT_TWINS`), with its settings
        (the main job's: :data:`OFT_MAIN_SETTINGS`): no policy episodes (there is no OFT policy yet), no adapters,
        written to ``<output_dir>/oft``."""
        settings = list(OFT_MAIN_SETTINGS) if self.settings == MAIN_SETTINGS and not self.methods else self.settings
        return dataclasses.replace(self, preset=OFT_TWINS[self.preset], output_dir=self.output_dir / "oft",
                                   settings=settings, policy_episodes=0, validation_episodes=0, adapters=[],
                                   oft=False)

    def _apply_profile(self) -> None:
        """Fill every flag left unset from the profile (``main``, or ``full`` with ``--full true``)."""
        self._adapters_given = self.adapters is not None
        profile = "full" if self.full else "main"
        for name, value in PROFILES[profile].items():
            if getattr(self, name) is None:
                value = list(value) if isinstance(value, list) else value
                if name == "settings" and profile == "full":
                    value = value + compact_twins(self.methods, self.ratios, value)
                setattr(self, name, value)

    def __post_init__(self) -> None:
        from prismatic_tr.envs.splits import SPLITS
        from prismatic_tr.vla.spec import build_settings

        self._apply_profile()
        if self.policy_split not in SPLITS:
            raise ValueError(f"--policy_split {self.policy_split!r} is not allowed; use one of {sorted(SPLITS)}")

        build_settings(self.methods, self.ratios, self.spatial_merge_size)  # names a bad method/ratio/size
        from prismatic_tr.vla.spec import parse_setting

        for spec in self.settings:
            parse_setting(spec)
        if self.compile and self.warmup < 1:
            raise ValueError(f"--compile true needs --warmup >= 1 (got {self.warmup}): the warm-up rounds compile "
                             "every setting, so that no timed round includes compilation")
        if self.freeze and not self.compile:
            raise ValueError("--freeze true is inductor's freezing of the compiled blocks; add --compile true")
        for name in ("policy_episodes", "validation_episodes"):
            check_int_flag(name, getattr(self, name), 0)
        self._check_adapters()
        for name, low in (("num_runs", 1), ("warmup", 0), ("batch_size", 1), ("num_threads", 0)):
            check_int_flag(name, getattr(self, name), low)
        resolve_dtype(self.dtype)
        resolve_device(self.device, "--device")
        # an empty value reaches here as None (draccus 0.8) or "None" (draccus 0.3)
        if not isinstance(self.instruction, str) or self.instruction.strip() in ("", "None"):
            raise ValueError("--instruction is empty; give the task text of the prompt")
        if self.output_dir.exists() and not self.output_dir.is_dir():
            raise ValueError(f"--output_dir {str(self.output_dir)!r} is a file; give a directory")
        if self.oft and (self.vla_path is not None or self.preset not in OFT_TWINS):
            raise ValueError(f"--oft true needs no --vla_path and a --preset with an OpenVLA-OFT twin "
                             f"({', '.join(str(k) for k in OFT_TWINS if k)}, or none for cpu-bench); got --preset "
                             f"{self.preset!r}" + (" and --vla_path" if self.vla_path else ""))
        model_config = self._model_config()  # before any model is built
        self._check_against_model(model_config)

    def _check_adapters(self) -> None:
        """Every ``--adapters`` entry given is a shipped adapter or a directory holding one; no name twice (the
        profile's shipped adapters are looked up when they run, and noted if missing)."""
        if len(set(self.adapters)) != len(self.adapters):
            raise ValueError(f"--adapters {self.adapters} names an adapter twice; give each once")
        if self.adapters and self._adapters_given:
            from prismatic_tr.policy.adapters import adapter_dir

            for name in self.adapters:
                adapter_dir(name)  # ValueError naming the shipped adapters

    def _model_config(self) -> dict[str, Any]:
        """The fields of the model's config that flags must agree with: from ``--vla_path``'s config.json,
        else from ``--preset`` / ``--vision_backbone_id``; ``"source"`` says which."""
        from prismatic_tr.models.backbones import vision_backbone_spec
        from prismatic_tr.models.config import (  # imports transformers: after the cheap checks
            PRESETS,
            SYNTHETIC_NORM_STATS,
            VISION_BACKBONE_IDS,
        )
        from prismatic_tr.models.oft_config import OFT_PRESETS

        if self.vla_path is not None:
            if self.preset is not None:
                raise ValueError(f"--preset {self.preset!r} and --vla_path both name a model; pass one of them")
            path = Path(self.vla_path)
            if not path.is_dir():
                raise ValueError(f"--vla_path {self.vla_path!r} is not a directory; give a checkpoint directory")
            if not (path / "config.json").is_file():
                raise ValueError(f"--vla_path {self.vla_path!r} has no config.json; it is not a checkpoint directory")
            try:
                config = json.loads((path / "config.json").read_text())
            except json.JSONDecodeError as err:
                raise ValueError(f"--vla_path {self.vla_path!r}: config.json is not valid JSON ({err})") from None
            return {**config, "source": f"the checkpoint {self.vla_path}"}
        presets = sorted([*PRESETS, *OFT_PRESETS])
        if self.preset is not None and self.preset not in presets:
            raise ValueError(f"--preset {self.preset!r} is not allowed; choose one of {presets}")
        if self.vision_backbone_id not in VISION_BACKBONE_IDS:
            raise ValueError(f"--vision_backbone_id {self.vision_backbone_id!r} is not allowed; choose one of "
                             f"{sorted(VISION_BACKBONE_IDS)}")
        spec = vision_backbone_spec(self.vision_backbone_id)
        return {"timm_model_ids": list(spec.timm_model_ids), "image_sizes": list(spec.image_sizes),
                "norm_stats": SYNTHETIC_NORM_STATS, "source": self.vision_backbone_id}

    def _check_against_model(self, config: dict[str, Any]) -> None:
        """Merge sizes (the flag's and those of ``spatial_pool`` specs) against the patch grid, unnorm_key against
        the norm_stats (when the config has them)."""
        from prismatic_tr.vla.grid import check_merge_sizes, grid_from_config
        from prismatic_tr.vla.spec import POOL_METHOD, parse_setting

        grid = grid_from_config(config)
        if grid is not None:
            specs = [p for spec in self.settings for p in parse_setting(spec).parts if p.method == POOL_METHOD]
            check_merge_sizes([self.spatial_merge_size, *(p.spatial_merge_size for p in specs)], grid,
                              config["source"])
        stats = config.get("norm_stats")
        if self.unnorm_key is not None and isinstance(stats, dict) and self.unnorm_key not in stats:
            raise ValueError(f"--unnorm_key {self.unnorm_key!r} is not in the norm_stats of {config['source']}; "
                             f"allowed: {sorted(stats)}")


def resolve_dtype(name: str, device: torch.device | None = None) -> torch.dtype:
    """``auto``: OpenVLA's inference dtype, bfloat16, where ``device`` computes it in hardware, else float32
    (:func:`prismatic_tr.bench.measure.devices.fast_dtype`); ``ValueError`` for other names."""
    return _resolve_dtype(name, "--dtype", auto=fast_dtype(device if device is not None else torch.device("cpu")))
