"""Benchmark one OpenVLA control step with and without visual token reduction: speed beside success.

With no arguments (the main job, about 6 minutes on 2 CPU cores): builds the reference OpenVLA-architecture model
(preset ``cpu-bench`` on a CPU: the real DINOv2-L + SigLIP-so400m towers and a Llama 2048 wide and 8 layers deep,
~1/16 of Llama-2-7B; ``openvla-7b`` on a GPU; random weights, bf16) and times ``predict_action`` end to end,
unreduced and under the settings of ``MAIN_SETTINGS``, interleaved; then the bundled trained tabletop policy
runs ``--policy_episodes`` closed-loop episodes of the held-out **test** split under every setting (success with
its Wilson interval, action error). Speed is the cpu-bench model's, success the bundled policy's: settings are
fractions of tokens and of depth, applied to each model (the block each cuts after is in the ``cut`` column).
Prints a table and writes ``results.csv``, ``results.json``, ``results.png`` and ``tradeoff.png`` into
``--output_dir``. One progress bar covers the whole job, with an estimate of the time left.

``--full true`` runs the full sweep instead: every projector method x ``--ratios`` (``spatial_pool`` at merge
sizes 2 and 4), every site setting of ``FULL_SITE_SETTINGS``, each beside its v0.2 ``:compact`` numbering where
that differs, 100 episodes per setting and 10 timed rounds (about an hour on 2 cores). Any of ``--methods``,
``--ratios``, ``--settings``, ``--policy_episodes``, ``--num_runs``, ``--warmup`` given on the command line
overrides the profile's value.

    python vla_scripts/benchmark.py
    python vla_scripts/benchmark.py --full true
    python vla_scripts/benchmark.py --preset tiny --num_runs 3 --policy_episodes 0
    python vla_scripts/benchmark.py --methods topk_magnitude random --ratios 0.5 --vla_path /path/to/ckpt

With ``--vla_path`` the rows describe that checkpoint only: the bundled policy's success is added only when the
checkpoint is the bundled policy itself (measure your own model's success with ``eval_offline.py``).

List flags take ``--ratios 0.75 0.5``, ``--ratios 0.75,0.5`` or ``--ratios "[0.75,0.5]"``. Bad flags exit
with status 2 before any model is built. Rows whose timings the machine disturbed (the vision phase, the
same work in every row, departs from the baseline's, or a row's runs spread too far; see
prismatic_tr.bench.measure.noise) are flagged ``noise_flag`` and warned about; with ``--strict`` such a run
exits with status 3.
"""

import dataclasses
import datetime
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prismatic_tr.bench.measure.devices import fast_dtype, resolve_device
from prismatic_tr.bench.measure.devices import resolve_dtype as _resolve_dtype
from vla_scripts.cli import EXIT_BAD_INPUT, EXIT_NOISY, parse_config_or_exit

# --full's projector methods: every registered reducer (the seed design's four and the selections measured since).
DEFAULT_METHODS = ["diverse", "salient_diverse", "saliency", "topk_magnitude", "attention_score", "random",
                   "spatial_pool"]
# The main job: what a user needs to see the trade-off: the default selection at both sites and the keeps that
# matter, compact numbering once, and the llm site (under 10 minutes on 2 cores; random and the seed design's
# scorers are in --full and benchmarks/results/selection/).
MAIN_SETTINGS = [
    "diverse:0.25", "diverse:0.1",
    "vision:diverse:0.25@0.25", "vision:diverse:0.25@0.25:compact", "vision:diverse:0.1@0.25",
    "llm:attention:0.5@0.25",
]
# --full: reduction inside the vision towers and inside the language model (see prismatic_tr.bench.vla.specs).
FULL_SITE_SETTINGS = [
    "spatial_pool:4x4",
    *(f"vision:{m}:{k}@0.25" for m in ("diverse", "salient_diverse", "saliency", "norm", "attention", "random")
      for k in (0.5, 0.25, 0.1)),
    "vision:diverse:0.25@0.5", "vision:diverse:0.25@0.1",
    "llm:attention:0.5@0.25", "llm:attention:0.25@0.25",
    "vision:diverse:0.25@0.25+llm:attention:0.5@0.25", "vision:diverse:0.25@0.1+llm:attention:0.5@0.125",
]
# Each profile's values for the flags a user leaves unset.
PROFILES: dict[str, dict[str, Any]] = {
    "main": {"methods": [], "ratios": [0.5, 0.25, 0.1], "settings": MAIN_SETTINGS, "policy_episodes": 50,
             "num_runs": 3, "warmup": 1},
    "full": {"methods": DEFAULT_METHODS, "ratios": [0.5, 0.25, 0.1], "settings": FULL_SITE_SETTINGS,
             "policy_episodes": 100, "num_runs": 10, "warmup": 2},
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
    preset: str | None = None                  # reference model: tiny | cpu-bench | openvla-7b (default: cpu-bench on CPU, openvla-7b on GPU)
    vision_backbone_id: str = "dinosiglip-vit-so-224px"  # dinosiglip-vit-so-224px | siglip-vit-so400m
    vla_path: str | None = None                # checkpoint directory to load instead of the random reference model
    methods: list[str] | None = None           # projector-site methods x --ratios (default: the profile's; main: none)
    ratios: list[float] | None = None          # fractions of visual tokens kept (default: 0.5 0.25 0.1)
    spatial_merge_size: int = 2                # spatial_pool window (keeps 1 / size**2 of the tokens)
    settings: list[str] | None = None          # further specs: any site, ':compact' positions (default: the profile's)
    policy_episodes: int | None = None         # closed-loop episodes of the bundled policy per setting (0: none; main 50, full 100)
    policy_split: str = "test"                 # seed split of those episodes (test: held out; validation: for choosing)
    num_runs: int | None = None                # timed rounds, every setting once per round, interleaved (main 5, full 10)
    warmup: int | None = None                  # untimed rounds first (main 1, full 2)
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
    # fmt: on

    def _apply_profile(self) -> None:
        """Fill every flag left unset from the profile (``main``, or ``full`` with ``--full true``)."""
        profile = "full" if self.full else "main"
        for name, value in PROFILES[profile].items():
            if getattr(self, name) is None:
                value = list(value) if isinstance(value, list) else value
                if name == "settings" and profile == "full":
                    value = value + compact_twins(self.methods, self.ratios, value)
                setattr(self, name, value)

    def __post_init__(self) -> None:
        from prismatic_tr.bench.vla.specs import build_settings
        from prismatic_tr.envs.splits import SPLITS

        self._apply_profile()
        if self.policy_split not in SPLITS:
            raise ValueError(f"--policy_split {self.policy_split!r} is not allowed; use one of {sorted(SPLITS)}")

        build_settings(self.methods, self.ratios, self.spatial_merge_size)  # names a bad method/ratio/size
        from prismatic_tr.bench.vla.specs import parse_setting

        for spec in self.settings:
            parse_setting(spec)
        if self.compile and self.warmup < 1:
            raise ValueError(f"--compile true needs --warmup >= 1 (got {self.warmup}): the warm-up rounds compile "
                             "every setting, so that no timed round includes compilation")
        if isinstance(self.policy_episodes, bool) or self.policy_episodes < 0:
            raise ValueError(f"--policy_episodes {self.policy_episodes!r} is not allowed; use an integer >= 0")
        for name, low in (("num_runs", 1), ("warmup", 0), ("batch_size", 1), ("num_threads", 0)):
            if getattr(self, name) < low:
                raise ValueError(f"--{name} {getattr(self, name)} is not allowed; use an integer >= {low}")
        resolve_dtype(self.dtype)
        resolve_device(self.device, "--device")
        # an empty value reaches here as None (draccus 0.8) or "None" (draccus 0.3)
        if not isinstance(self.instruction, str) or self.instruction.strip() in ("", "None"):
            raise ValueError("--instruction is empty; give the task text of the prompt")
        if self.output_dir.exists() and not self.output_dir.is_dir():
            raise ValueError(f"--output_dir {str(self.output_dir)!r} is a file; give a directory")
        model_config = self._model_config()  # before any model is built
        self._check_against_model(model_config)

    def _model_config(self) -> dict[str, Any]:
        """The fields of the model's config that flags must agree with: from ``--vla_path``'s config.json,
        else from ``--preset`` / ``--vision_backbone_id``; ``"source"`` says which."""
        from prismatic_tr.models.backbones import vision_backbone_spec
        from prismatic_tr.models.config import (  # imports transformers: after the cheap checks
            PRESETS,
            SYNTHETIC_NORM_STATS,
            VISION_BACKBONE_IDS,
        )

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
        if self.preset is not None and self.preset not in PRESETS:
            raise ValueError(f"--preset {self.preset!r} is not allowed; choose one of {sorted(PRESETS)}")
        if self.vision_backbone_id not in VISION_BACKBONE_IDS:
            raise ValueError(f"--vision_backbone_id {self.vision_backbone_id!r} is not allowed; choose one of "
                             f"{sorted(VISION_BACKBONE_IDS)}")
        spec = vision_backbone_spec(self.vision_backbone_id)
        return {"timm_model_ids": list(spec.timm_model_ids), "image_sizes": list(spec.image_sizes),
                "norm_stats": SYNTHETIC_NORM_STATS, "source": self.vision_backbone_id}

    def _check_against_model(self, config: dict[str, Any]) -> None:
        """Merge sizes (the flag's and those of ``spatial_pool`` specs) against the patch grid, unnorm_key against
        the norm_stats (when the config has them)."""
        from prismatic_tr.bench.vla.specs import (
            POOL_METHOD,
            check_merge_sizes,
            grid_from_config,
            parse_setting,
        )

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


def load_model(cfg: BenchmarkConfig, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any, str]:
    """(vla, processor, description): the checkpoint at ``--vla_path``, else the random reference model."""
    from prismatic_tr.models import build_processor, build_vla, load_vla

    if cfg.vla_path is not None:
        try:
            vla, processor = load_vla(cfg.vla_path, dtype=dtype, device=str(device), reference_api=True)
        except (OSError, ValueError) as err:  # RemoteCodeError is a ValueError
            print(f"benchmark.py: error: cannot load --vla_path {cfg.vla_path!r}: {err}", file=sys.stderr)
            raise SystemExit(EXIT_BAD_INPUT) from None
        return vla, processor, f"checkpoint {cfg.vla_path}"
    preset = cfg.preset or ("openvla-7b" if device.type == "cuda" else "cpu-bench")
    vla = build_vla(preset, cfg.vision_backbone_id, dtype=dtype, device=device, seed=cfg.seed)
    return vla, build_processor(vla.config), f"reference model, preset {preset}, RANDOM weights"


def sample_inputs(processor: Any, instruction: str, batch_size: int, image_size: int, seed: int) -> dict:
    """Processor outputs for ``batch_size`` synthetic RGB images (fixed seed) and one instruction."""
    from PIL import Image

    from prismatic_tr.models import build_prompt

    rng = np.random.default_rng(seed)
    images = [Image.fromarray(rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8))
              for _ in range(batch_size)]
    prompt = build_prompt(instruction)
    if batch_size == 1:
        return dict(processor(prompt, images[0], return_tensors="pt"))
    return dict(processor([prompt] * batch_size, images, return_tensors="pt"))


def load_average() -> list[float] | None:
    """The 1 / 5 / 15-minute load average (``os.getloadavg``), or None where the platform has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def run_metadata(cfg: BenchmarkConfig, source: str, device: torch.device, dtype: torch.dtype,
                 load_at_start: list[float] | None = None) -> dict[str, Any]:
    """Command, date, machine (with the load average at start) and settings, stored in results.json."""
    import transformers

    from prismatic_tr.bench.measure.noise import NoiseRule

    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "command": " ".join(["python", "vla_scripts/benchmark.py", *sys.argv[1:]]),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "gpu": gpu,
                    "load_average_at_start": load_at_start},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "model": source, "random_weights": cfg.vla_path is None, "device": str(device),
        "dtype": str(dtype).replace("torch.", ""),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()},
        "conventions": {
            "latency": "median over timed runs (p10/p90 alongside), ms; baseline and settings interleaved",
            "macs": "GMACs per step for the whole batch: matmul-like ops, one multiply-add = 1 MAC",
            "peak_memory_mb": "torch.cuda.max_memory_allocated over one step; None on a CPU",
            "ideal_speedup": "Amdahl bound from baseline phases: projector x K/N, prefill x (T+K)/(T+N), "
                             "vision and decode unchanged, reducer free",
            "fidelity": "against the unreduced model on the same inputs (generate / predict_action)",
            "noise_flag": NoiseRule().describe() + " (prismatic_tr.bench.measure.noise)",
            "load_average_at_start": "os.getloadavg() (1, 5, 15 min) when the command started",
        },
    }


def write_outputs(records: list[dict], meta: dict[str, Any], output_dir: Path) -> list[Path]:
    """results.csv, results.json and results.png in ``output_dir`` (created if needed)."""
    from prismatic_tr.bench.vla.report import plot_results, write_csv, write_json

    output_dir.mkdir(parents=True, exist_ok=True)
    title = f"{meta['model']} | {meta['device']} {meta['dtype']} | batch {meta['config']['batch_size']}"
    return [
        write_csv(records, output_dir / "results.csv"),
        write_json(records, output_dir / "results.json", meta),
        plot_results(records, output_dir / "results.png", title=title),
    ]


def headline(records: list[dict]) -> str:
    """Per setting: speedup against its Amdahl bound and the reducer's share of the vision time."""
    lines = []
    for r in records[1:]:
        bound = (f" (phases {r['speedup']:.3f} of ideal {r['ideal_speedup']:.3f}, efficiency {r['efficiency']:.2f}; "
                 f"prefill {r['prefill_speedup']:.3f} of {r['prefill_ideal_speedup']:.3f}; reducer "
                 f"{r['reducer_pct_of_vision']:.2f}% of vision)") if r.get("ideal_speedup") is not None else \
            f" (phases {r['speedup']:.3f})"
        success = f"; success {r['success_rate']:.0%}" if r.get("success_rate") is not None else ""
        lines.append(f"  {r['setting']:>34}: predict_action {r['predict_action_speedup']:.3f}x{bound}{success}"
                     + ("  [NOISY: not a result]" if r.get("noise_flag") else ""))
    return "\n".join(lines)


def policy_success_applies(cfg: BenchmarkConfig) -> str | None:
    """None when the bundled policy's success belongs in these rows, else the reason it does not: with
    ``--vla_path`` the rows describe that checkpoint, so the bundled policy's success is added only when the
    checkpoint is the bundled policy itself."""
    if cfg.policy_episodes == 0:
        return "not measured (--policy_episodes 0)"
    if cfg.vla_path is None:
        return None
    from prismatic_tr.policy.bundled import BUNDLED_POLICY_DIR

    if Path(cfg.vla_path).resolve() == BUNDLED_POLICY_DIR.resolve():
        return None
    return (f"not measured: --vla_path {cfg.vla_path} is not the bundled policy, whose success would not be this "
            "model's (measure yours with vla_scripts/eval_offline.py on your data)")


def add_policy_fidelity(records: list[dict], cfg: BenchmarkConfig, progress: Any = None) -> str:
    """Success and action error of the bundled trained policy under the same settings, merged into the records;
    returns a line for the metadata saying what was done (or why not)."""
    reason = policy_success_applies(cfg)
    if reason is not None:
        return reason
    from prismatic_tr.bench.vla.specs import parse_setting
    from prismatic_tr.envs.splits import seed_split
    from prismatic_tr.policy.fidelity import policy_fidelity

    try:
        fields = policy_fidelity([parse_setting(r["setting"]) for r in records], cfg.policy_episodes,
                                 split=cfg.policy_split,
                                 on_episode=(lambda *_: progress.step("episode")) if progress else None)
    except ValueError as err:  # the bundled policy is missing
        print(f"NOTE: no policy fidelity: {err}")
        return f"not measured: {err}"
    for rec in records:
        rec.update(fields[rec["setting"]])
    first = seed_split(cfg.policy_split).first
    return (f"bundled tabletop policy (prismatic_tr/assets/tabletop_policy): {cfg.policy_episodes} closed-loop episodes "
            f"per setting of the {cfg.policy_split} split (seeds {first:,}-{first + cfg.policy_episodes - 1:,}), the "
            "same seeds for every setting; action error on the scripted expert's steps (offline split)")


# Expected seconds per unit of work on 2 CPU cores, to weigh the progress bar (only its time-left estimate uses them).
SECONDS_PER = {"record": 10.0, "round": 2.5, "episode": 0.5}


def job_progress(cfg: BenchmarkConfig, settings: int) -> Any:
    """One bar over the timing of every setting and the policy's episodes (see JobProgress)."""
    from prismatic_tr.bench.measure.progress import JobProgress

    episodes = 0 if policy_success_applies(cfg) is not None else cfg.policy_episodes * settings
    plan = {"record": (settings, SECONDS_PER["record"]),
            "round": ((cfg.warmup + cfg.num_runs) * settings, SECONDS_PER["round"]),
            "episode": (episodes, SECONDS_PER["episode"])}
    return JobProgress(plan, desc="benchmark", enabled=cfg.progress)


def count_settings(cfg: BenchmarkConfig) -> int:
    """Rows the job will have: the baseline, the method x ratio grid and the further specs, without repeats."""
    from prismatic_tr.bench.vla.specs import build_settings, parse_setting

    grid = build_settings(cfg.methods, cfg.ratios, cfg.spatial_merge_size)
    return len(dict.fromkeys(grid + [parse_setting(s) for s in cfg.settings]))


def main(cfg: BenchmarkConfig) -> list[dict]:
    """Build or load the model, benchmark every setting, print the table and write the three files."""
    from prismatic_tr.bench.measure.noise import NoiseRule, noise_warnings
    from prismatic_tr.bench.vla.benchmark import benchmark_token_reduction
    from prismatic_tr.bench.vla.report import format_table

    start, load_at_start = time.perf_counter(), load_average()
    if cfg.num_threads > 0:
        torch.set_num_threads(cfg.num_threads)
    device = resolve_device(cfg.device)
    dtype = resolve_dtype(cfg.dtype, device)
    vla, processor, source = load_model(cfg, device, dtype)
    if cfg.compile:
        from prismatic_tr.bench.vla.compiled import compile_blocks

        compile_blocks(vla)  # for the rest of this process; the warm-up rounds compile each setting
        source += " (blocks compiled)"
    image_size = int(getattr(getattr(vla, "config", None), "image_sizes", [224])[0])
    inputs = sample_inputs(processor, cfg.instruction, cfg.batch_size, image_size, cfg.seed)
    meta = run_metadata(cfg, source, device, dtype, load_at_start)
    print(f"model: {source} | device {device} | dtype {meta['dtype']} | batch {cfg.batch_size}")
    if meta["random_weights"]:
        print("NOTE: the weights are RANDOM. Latencies are real; fidelity numbers (agreement, action error, KL) "
              "only show that the machinery works. Pass --vla_path for a trained checkpoint.")
    progress = job_progress(cfg, count_settings(cfg))
    records = benchmark_token_reduction(
        vla, inputs, methods=cfg.methods, ratios=cfg.ratios, spatial_merge_size=cfg.spatial_merge_size,
        num_runs=cfg.num_runs, warmup=cfg.warmup, progress=cfg.progress, unnorm_key=cfg.unnorm_key, seed=cfg.seed,
        extra_settings=cfg.settings, on_progress=progress.step,
    )
    del vla  # the speed model's memory is not needed for the policy's episodes
    meta["policy_fidelity"] = add_policy_fidelity(records, cfg, progress)
    progress.close()
    print(format_table(records))
    print("latencies: medians in ms; speedup = baseline total / total (same run, interleaved); ideal = Amdahl "
          "bound; MACs per step; peak MB only on CUDA")
    print(headline(records))
    warnings = noise_warnings(records, load_at_start)
    print("\n".join(warnings) if warnings else "noise: no row flagged (" + NoiseRule().describe() + ")")
    has_success = any(r.get("success_rate") is not None for r in records)
    if has_success:
        from prismatic_tr.policy.report import best_within

        best = best_within(records)
        meta["best_within_2pp"] = {site: r["setting"] for site, r in best.items()}
        for site, r in best.items():
            print(f"best {site} setting within 2 points of unreduced success: {r['setting']} "
                  f"({r['predict_action_speedup']:.2f}x, success {r['success_rate']:.0%} "
                  f"[{r['success_ci_low']:.0%}, {r['success_ci_high']:.0%}])")
    meta["wall_s"] = round(time.perf_counter() - start, 1)
    meta["noisy_rows"] = sum(bool(r["noise_flag"]) for r in records)
    paths = write_outputs(records, meta, cfg.output_dir)
    if has_success:
        from prismatic_tr.policy.report import plot_tradeoff

        n = records[0].get("policy_episodes")
        paths.append(plot_tradeoff(
            records, cfg.output_dir / "tradeoff.png",
            "speed and success of each setting (fractions of tokens and depth, applied to each model)",
            x_label=f"end-to-end speedup of predict_action on {source}",
            y_label=f"success of the bundled tabletop policy ({n} {cfg.policy_split}-split episodes, 95 % interval)"))
    for path in paths:
        print(f"wrote {path}")
    print(f"finished in {meta['wall_s']:.0f} s")
    if cfg.strict and warnings:
        print(f"benchmark.py: --strict: {meta['noisy_rows']} noisy rows; exiting with status {EXIT_NOISY}",
              file=sys.stderr)
        raise SystemExit(EXIT_NOISY)
    return records


def parse_config(args: list[str] | None = None) -> BenchmarkConfig:
    """Parse flags; on a bad value print ``benchmark.py: error: ...`` and exit with status 2."""
    return parse_config_or_exit(BenchmarkConfig, args, "benchmark.py", description=__doc__)


if __name__ == "__main__":
    main(parse_config())
