"""LoRA adapters that fit the bundled policy to a reduction setting, shipped in ``prismatic_tr/assets/adapters/``.

Each adapter directory holds peft's ``adapter_config.json`` and ``adapter_model.safetensors`` (float16: half the
size, the merged policy is the one its records were measured on), ``token_reduction.json`` (the setting it was
trained under, as a checkpoint's ``config.token_reduction``) and ``record.json`` (how it was made: source
checkpoint, the bundled policy's sha256, training command and time, the validation curve and the test result).
``scripts/finetune_reduced.sh`` makes and installs one; :func:`load_adapted_policy` gives the reduced policy::

    vla, processor = load_adapted_policy("vision-diverse-0.1-0.25")      # bundled policy + adapter + reduction
    action = vla.predict_action(image, prompt, unnorm_key=UNNORM_KEY)

    python -m prismatic_tr.policy.adapters install <checkpoint> <dest> [--results <finetune_reduced output dir>]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from prismatic_tr.policy.bundled import BUNDLED_POLICY_DIR, bundled_policy_dir

ADAPTERS_DIR = BUNDLED_POLICY_DIR.parent / "adapters"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
SETTING_FILE, RECORD_FILE = "token_reduction.json", "record.json"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def shipped_adapters() -> list[str]:
    """Names of the adapters in ``prismatic_tr/assets/adapters``."""
    if not ADAPTERS_DIR.is_dir():
        return []
    return sorted(p.name for p in ADAPTERS_DIR.iterdir() if (p / SETTING_FILE).is_file())


def adapter_dir(name_or_dir: str | Path) -> Path:
    """A shipped adapter's directory by name, or a directory holding one; ValueError naming what exists."""
    path = Path(name_or_dir)
    if not (path / SETTING_FILE).is_file():
        path = ADAPTERS_DIR / str(name_or_dir)
    missing = [f for f in (*ADAPTER_FILES, SETTING_FILE) if not (path / f).is_file()]
    if missing:
        raise ValueError(f"adapter {str(name_or_dir)!r} is not a shipped adapter {shipped_adapters()} nor a "
                         f"directory holding {list(ADAPTER_FILES) + [SETTING_FILE]}")
    return path


def read_adapter(name_or_dir: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(token-reduction setting dict, record dict) of an adapter."""
    path = adapter_dir(name_or_dir)
    record = json.loads((path / RECORD_FILE).read_text()) if (path / RECORD_FILE).is_file() else {}
    return json.loads((path / SETTING_FILE).read_text()), record


def load_adapted_policy(name_or_dir: str | Path, base: str | Path | None = None, apply_reduction: bool = True,
                        dtype: torch.dtype | None = None, device: str | torch.device = "cpu") -> tuple[Any, Any]:
    """(vla, processor): the base policy (default: the bundled one) with the adapter merged in and, with
    ``apply_reduction``, the adapter's setting attached (``prismatic_tr.vla.apply_token_reduction_from_config``).

    ValueError when the base is not the policy the adapter was trained on (its record's sha256 of
    ``model.safetensors``), so an adapter never silently lands on other weights.
    """
    try:
        from peft import PeftModel
    except ImportError as err:
        raise ImportError("load_adapted_policy needs peft: pip install 'prismatic_tr[train]'") from err

    from prismatic_tr.models import load_vla
    from prismatic_tr.vla import apply_token_reduction_from_config

    path = adapter_dir(name_or_dir)
    setting, record = read_adapter(path)
    base_dir = Path(base) if base is not None else bundled_policy_dir()
    expected = record.get("base_sha256")
    if expected and (base_dir / "model.safetensors").is_file() and sha256_of(base_dir / "model.safetensors") != expected:
        raise ValueError(f"the adapter {path.name!r} was trained on a base policy with model.safetensors sha256 "
                         f"{expected[:12]}..., not on {str(base_dir)!r}; load it on that policy")
    vla, processor = load_vla(base_dir, dtype=dtype, device=device)
    merged = PeftModel.from_pretrained(vla, str(path), config=lora_config(path)).merge_and_unload()
    merged.config.token_reduction = setting
    if apply_reduction:
        apply_token_reduction_from_config(merged)
    return merged, processor


# adapter_config.json keys a newer peft writes that say nothing when off (None / False / empty), or are bookkeeping
_BOOKKEEPING = {"peft_version", "qalora_group_size", "megatron_core", "auto_mapping"}


def lora_config(path: Path) -> Any:
    """The adapter's ``LoraConfig`` for the installed peft: keys this peft does not know are dropped when they are
    off or bookkeeping (peft 0.21 writes ``alora_invocation_tokens``, ``use_qalora``, ... which 0.11 refuses), so an
    adapter saved on the newest stack loads on OpenVLA's pins; ValueError naming a key that is on."""
    from peft import LoraConfig

    data = json.loads((path / "adapter_config.json").read_text())
    known = {f.name for f in dataclasses.fields(LoraConfig)}
    used = sorted(k for k, v in data.items() if k not in known and k not in _BOOKKEEPING and v not in (None, False, {}, [], ""))
    if used:
        raise ValueError(f"adapter {str(path)!r} uses {used}, which this peft's LoraConfig does not know; upgrade peft")
    return LoraConfig(**{k: v for k, v in data.items() if k in known})


def _summaries(results_dir: Path) -> dict[str, Any]:
    """Validation curve and test rows of a ``finetune_reduced.sh`` output directory (success under the setting
    and unreduced, Wilson 95 %)."""
    def rows(f: Path) -> dict[str, Any]:
        data = json.loads(f.read_text())
        keep = ("setting", "successes", "episodes", "success_rate", "success_ci_low", "success_ci_high")
        return {"split": data["meta"]["split"], "seeds": data["meta"]["seeds"], "command": data["meta"]["command"],
                "records": [{k: r[k] for k in keep} for r in data["records"]]}
    out: dict[str, Any] = {"validation": {}, "test": None}
    for f in sorted(results_dir.glob("eval_val_step_*/results.json")):
        out["validation"][f.parent.name.removeprefix("eval_val_")] = rows(f)
    if (results_dir / "eval_test" / "results.json").is_file():
        out["test"] = rows(results_dir / "eval_test" / "results.json")
    wall = results_dir / "training_wall.txt"
    if wall.is_file():
        out["training_wall"] = wall.read_text().strip()
    return out


def _trained_on(training_config: str | None) -> Path:
    """The ``vla_path`` of a run's ``config.yaml`` (the bundled policy when there is none)."""
    import yaml

    vla_path = (yaml.safe_load(training_config) or {}).get("vla_path") if training_config else None
    return Path(vla_path) if vla_path else bundled_policy_dir()


def install_adapter(checkpoint: str | Path, dest: str | Path, results_dir: str | Path | None = None,
                    base: str | Path | None = None) -> Path:
    """Copy a fine-tuning checkpoint's adapter (weights to float16), its reduction setting and a record into
    ``dest``. ``base``: the policy it was trained on (default: the run's ``vla_path``), whose sha256 the record
    keeps. ValueError when ``checkpoint`` has no adapter or no reduction setting."""
    from safetensors.torch import load_file, save_file

    ckpt, dest = Path(checkpoint), Path(dest)
    src = ckpt / "adapter"
    config = json.loads((ckpt / "config.json").read_text()) if (ckpt / "config.json").is_file() else {}
    setting = config.get("token_reduction")
    if not all((src / f).is_file() for f in ADAPTER_FILES) or not setting:
        raise ValueError(f"checkpoint {str(ckpt)!r} needs adapter/{ADAPTER_FILES} and a config.json with "
                         "token_reduction (a vla_scripts/finetune.py LoRA checkpoint trained under a reduction)")
    run_dir = ckpt.parents[1]
    training_config = (run_dir / "config.yaml").read_text() if (run_dir / "config.yaml").is_file() else None
    base = Path(base) if base is not None else _trained_on(training_config)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "adapter_config.json", dest / "adapter_config.json")
    weights = {k: v.to(torch.float16).contiguous() for k, v in load_file(str(src / "adapter_model.safetensors")).items()}
    save_file(weights, str(dest / "adapter_model.safetensors"))
    (dest / SETTING_FILE).write_text(json.dumps(setting, indent=2) + "\n")
    record: dict[str, Any] = {
        "source_checkpoint": str(ckpt), "base": str(base), "base_sha256": sha256_of(base / "model.safetensors"),
        "training_config": training_config, "weights_dtype": "float16",
    }
    if results_dir is not None:
        record.update(_summaries(Path(results_dir)))
    (dest / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
    return dest


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m prismatic_tr.policy.adapters", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install", help="install a fine-tuning checkpoint's adapter")
    inst.add_argument("checkpoint")
    inst.add_argument("dest")
    inst.add_argument("--results", default=None, help="finetune_reduced.sh output dir (curve and test rows)")
    sub.add_parser("list", help="the shipped adapters")
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            print(f"installed {install_adapter(args.checkpoint, args.dest, args.results)}")
        else:
            print("\n".join(shipped_adapters()))
    except ValueError as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
