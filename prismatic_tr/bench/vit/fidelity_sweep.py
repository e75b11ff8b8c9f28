"""The fidelity sweep of in-backbone token reduction on a timm ViT (``vla_scripts/eval_vit.py``): methods x keep
rates (and ToMe constant-r settings) against the unreduced model, with tokens, GMACs and warm interleaved timing.

:func:`run_sweep` builds the model and the images (an ImageFolder or seeded noise), measures every setting's
fidelity (agreement, KL, margin, CKA; :mod:`prismatic_tr.eval`) and tokens and GMACs per image, then times one batch
per setting, all settings interleaved (:func:`prismatic_tr.bench.measure.timing.interleaved`); :func:`write_outputs`
writes ``results.csv``, ``results.json`` and ``results.png``; :func:`format_table` is the printed table.
"""

# No "from __future__ import annotations": draccus 0.8 needs real (not string) field types.

import csv
import json
import platform
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from prismatic_tr.bench.measure.devices import resolve_device
from prismatic_tr.cli import check_int_flag

FIELDS = ["method", "keep_ratio", "r", "tokens_out", "gmacs", "top1_agreement", "kl_divergence", "margin_change",
          "linear_cka", "top1_accuracy", "top1_accuracy_baseline", "batch_ms", "batch_ms_p10", "batch_ms_p90",
          "speedup", "num_samples"]


@dataclass
class EvalVitConfig:
    # fmt: off
    model: str = "deit_small_patch16_224"     # timm model name (without a method prefix)
    methods: list[str] = field(default_factory=lambda: ["topk", "tome", "hquota_ff"])  # reduction methods
    keep_ratios: list[float] = field(default_factory=lambda: [0.9, 0.7, 0.5])  # kept fraction per location, in (0, 1]
    reduction_loc: list[int] | None = None    # 0-based blocks (default: [depth//4, depth//2, 3*depth//4])
    tome_r: list[int] = field(default_factory=list)  # extra ToMe settings with a constant r per block
    data_dir: Path | None = None              # torchvision ImageFolder root; default: generated noise images
    num_images: int = 32                      # generated images, or the most read from --data_dir
    batch_size: int = 16                      # images per forward
    img_size: int | None = None               # input side in pixels (timm img_size; default: the model's own)
    pretrained: bool = False                  # load timm weights (needs the model hub)
    device: str = "auto"                      # auto | cpu | cuda | cuda:N
    warmup: int = 2                           # untimed forwards of one batch per setting before timing
    timing_runs: int = 5                      # timed forwards of one batch per setting (interleaved; median)
    output_dir: Path = Path("outputs/eval_vit")  # where results.csv / .json / .png go
    seed: int = 0                             # weights (when not pretrained) and generated images
    progress: bool = True                     # tqdm progress bar over the settings
    # fmt: on

    def __post_init__(self) -> None:
        import timm

        from prismatic_tr.vit import METHODS, VitReductionConfig, split_method

        if split_method(self.model)[0] is not None or not timm.is_model(self.model):
            raise ValueError(f"--model {self.model!r} must be a plain timm model name (no {METHODS} prefix)")
        for method in self.methods:
            for rate in self.keep_ratios:
                VitReductionConfig(method=method, keep_ratio=rate, reduction_loc=self.reduction_loc)
        for r in self.tome_r:
            VitReductionConfig(method="tome", r=r)
        for name, low in (("num_images", 1), ("batch_size", 1), ("img_size", 1), ("warmup", 0), ("timing_runs", 1)):
            if getattr(self, name) is not None:
                check_int_flag(name, getattr(self, name), low)
        if self.data_dir is not None and not Path(self.data_dir).is_dir():
            raise ValueError(f"--data_dir {str(self.data_dir)!r} is not a directory; give an ImageFolder root")
        resolve_device(self.device, "--device")
        depth, tokens, prefix = _geometry(self.model, self.img_size)
        if self.reduction_loc is not None:
            bad = [i for i in self.reduction_loc if not 0 <= i < depth]
            if bad:
                raise ValueError(f"--reduction_loc entries {bad} are outside {self.model}'s depth; allowed 0..{depth - 1}")
        for r in self.tome_r:
            VitReductionConfig(method="tome", r=r).check_r_allowed(tokens, prefix, depth)


def _geometry(name: str, img_size: int | None) -> tuple[int, int, int]:
    """(blocks, tokens entering the first block, prefix tokens) of timm model ``name``, built without
    weights on the meta device."""
    import timm

    from prismatic_tr.bench.measure.flops import empty_weights

    extra = {} if img_size is None else {"img_size": img_size}
    try:
        with empty_weights():
            model = timm.create_model(name, pretrained=False, **extra)
        prefix, patches = int(getattr(model, "num_prefix_tokens", 0)), int(model.patch_embed.num_patches)
        depth = len(model.blocks)
    except AttributeError:
        raise ValueError(f"--model {name!r} is not a timm ViT (no patch_embed / blocks)") from None
    except (RuntimeError, TypeError, AssertionError) as err:
        raise ValueError(f"--model {name!r} cannot be built with --img_size {img_size}: {err}") from None
    if patches < 1:
        raise ValueError(f"--img_size {img_size} gives {name} no patch tokens; use a larger size")
    return depth, patches + prefix, prefix


def build_dataset(cfg: EvalVitConfig, model: torch.nn.Module) -> Dataset:
    """ImageFolder (model's eval transform, first ``num_images``) or ``num_images`` seeded noise images."""
    import timm.data

    img_size = getattr(getattr(model, "patch_embed", None), "img_size", None)
    args = {} if img_size is None else {"input_size": (3, *img_size)}
    data_cfg = timm.data.resolve_data_config(args, model=model)
    if cfg.data_dir is None:
        g = torch.Generator().manual_seed(cfg.seed)
        images = torch.rand(cfg.num_images, *data_cfg["input_size"], generator=g)
        mean, std = (torch.tensor(data_cfg[k]).view(1, 3, 1, 1) for k in ("mean", "std"))
        return TensorDataset((images - mean) / std)
    from torchvision.datasets import ImageFolder

    folder = ImageFolder(str(cfg.data_dir), transform=timm.data.create_transform(**data_cfg))
    if len(folder) == 0:
        raise ValueError(f"--data_dir {str(cfg.data_dir)!r} holds no images")
    return torch.utils.data.Subset(folder, range(min(cfg.num_images, len(folder))))


def settings(cfg: EvalVitConfig) -> list[dict[str, Any]]:
    """The sweep: baseline first, then methods x keep rates, then ToMe constant-r settings."""
    out: list[dict[str, Any]] = [{"method": "none", "keep_ratio": 1.0, "r": None}]
    out += [{"method": m, "keep_ratio": k, "r": None} for m in cfg.methods for k in cfg.keep_ratios]
    out += [{"method": "tome", "keep_ratio": None, "r": r} for r in cfg.tome_r]
    return out


def attach(model: torch.nn.Module, setting: dict[str, Any], cfg: EvalVitConfig) -> Any:
    """A context manager holding ``setting``'s reduction on ``model`` (nothing for the baseline)."""
    from prismatic_tr.vit import apply_vit_reduction

    if setting["method"] == "none":
        return nullcontext()
    kwargs = {"r": setting["r"]} if setting["r"] is not None else {"keep_ratio": setting["keep_ratio"],
                                                                    "reduction_loc": cfg.reduction_loc}
    return apply_vit_reduction(model, setting["method"], **kwargs)


def evaluate_setting(model: torch.nn.Module, setting: dict[str, Any], cfg: EvalVitConfig, loader: DataLoader,
                     example: torch.Tensor, base: Any) -> tuple[dict[str, Any], Any]:
    """Attach one setting, measure fidelity against ``base`` outputs (its own outputs when ``base`` is
    None: the baseline) and tokens and GMACs per image, detach; returns (row, outputs). Untimed."""
    from prismatic_tr.bench.measure.flops import count_macs
    from prismatic_tr.eval import collect_outputs, fidelity_from_outputs

    with attach(model, setting, cfg):
        outs = collect_outputs(model, loader, example.device)
        with torch.no_grad():
            macs = count_macs(model, example[:1])
            tokens = model.forward_features(example[:1]).shape[1]
    row = {**setting, "tokens_out": tokens, "gmacs": macs / 1e9}
    return {**row, **fidelity_from_outputs(outs if base is None else base, outs)}, outs


def time_settings(model: torch.nn.Module, setting_list: list[dict[str, Any]], cfg: EvalVitConfig,
                  example: torch.Tensor) -> list[dict[str, float]]:
    """Warm, interleaved timing of one batch forward per setting: ``batch_ms`` (median), p10, p90, and
    ``speedup`` against the first (baseline) setting. Attaching a setting is outside the timed region."""
    from prismatic_tr.bench.measure.timing import interleaved

    names = [f"{i}" for i in range(len(setting_list))]
    with torch.no_grad():
        contexts = {n: (lambda s=s: attach(model, s, cfg)) for n, s in zip(names, setting_list, strict=True)}
        stats = interleaved({n: (lambda: model(example)) for n in names}, warmup=cfg.warmup,
                            repeats=cfg.timing_runs, device=example.device, contexts=contexts)
    base = stats[names[0]].median_ms
    return [{"batch_ms": stats[n].median_ms, "batch_ms_p10": stats[n].p10_ms, "batch_ms_p90": stats[n].p90_ms,
             "speedup": base / stats[n].median_ms} for n in names]


def run_sweep(cfg: EvalVitConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Build the model and data, evaluate every setting; returns (rows, metadata)."""
    import timm
    from tqdm.auto import tqdm

    device = resolve_device(cfg.device, "--device")
    torch.manual_seed(cfg.seed)
    extra = {} if cfg.img_size is None else {"img_size": cfg.img_size}
    model = timm.create_model(cfg.model, pretrained=cfg.pretrained, **extra).to(device).eval()
    loader = DataLoader(build_dataset(cfg, model), batch_size=cfg.batch_size, shuffle=False)
    example = next(iter(loader))[0].to(device)
    sweep = settings(cfg)
    base_row, base = evaluate_setting(model, sweep[0], cfg, loader, example, None)
    rows = [base_row]
    for setting in tqdm(sweep[1:], desc="settings", disable=not cfg.progress):
        rows.append(evaluate_setting(model, setting, cfg, loader, example, base)[0])
    for row, timing in zip(rows, time_settings(model, sweep, cfg, example), strict=True):
        row.update(timing)
    meta = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
            "device": str(device), "torch": torch.__version__, "timm": timm.__version__,
            "python": platform.python_version(), "random_weights": not cfg.pretrained,
            "data": "generated noise" if cfg.data_dir is None else str(cfg.data_dir)}
    return rows, meta


def _label(row: dict[str, Any]) -> str:
    return row["method"] if row["r"] is None else f"{row['method']} (constant r)"


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Two panels, top-1 agreement and KL(B || M) against GMACs per image, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key in zip(axes, ("top1_agreement", "kl_divergence"), strict=True):
        for label in dict.fromkeys(_label(r) for r in rows):
            pts = sorted((r["gmacs"], r[key]) for r in rows if _label(r) == label)
            ax.plot(*zip(*pts, strict=True), marker="o" if label != "none" else "*", markersize=6 if label != "none" else 12,
                    label=label)
        ax.set_xlabel("GMACs per image")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_outputs(rows: list[dict[str, Any]], meta: dict[str, Any], output_dir: Path) -> list[Path]:
    output_dir.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = output_dir / "results.csv", output_dir / "results.json"
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    json_path.write_text(json.dumps({"meta": meta, "results": rows}, indent=2, default=str))
    title = f"{meta['config']['model']} | {meta['data']}" + (" | RANDOM weights" if meta["random_weights"] else "")
    return [csv_path, json_path, plot(rows, output_dir / "results.png", title)]


def format_table(rows: list[dict[str, Any]], cfg: EvalVitConfig) -> str:
    """The printed table: one line per setting, then what ``batch ms`` is."""
    lines = [f"{'method':>10} {'keep':>5} {'r':>4} {'tokens':>6} {'GMACs':>7} {'agree':>6} {'KL':>8} {'margin':>8} "
             f"{'CKA':>6} {'batch ms':>9} {'speedup':>7}"]
    for r in rows:
        lines.append(f"{r['method']:>10} {r['keep_ratio'] if r['keep_ratio'] is not None else '-':>5} "
                     f"{r['r'] if r['r'] is not None else '-':>4} {r['tokens_out']:>6} {r['gmacs']:>7.3f} "
                     f"{r['top1_agreement']:>6.3f} {r['kl_divergence']:>8.4f} {r['margin_change']:>8.3f} "
                     f"{r['linear_cka']:>6.3f} {r['batch_ms']:>9.2f} {r['speedup']:>7.3f}")
    lines.append(f"batch ms: median of {cfg.timing_runs} warm forwards of one batch of {cfg.batch_size}, settings "
                 f"interleaved; speedup against the unreduced model")
    return "\n".join(lines)
