"""LoRA adapters that fit the bundled policy to a reduction setting, shipped in ``prismatic_tr/assets/adapters/``.

Each adapter directory holds peft's ``adapter_config.json`` and ``adapter_model.safetensors`` (float16: half the
size, the merged policy is the one its records were measured on), ``token_reduction.json`` (the setting it was
trained under, as a checkpoint's ``config.token_reduction``) and ``record.json`` (how it was made: source
checkpoint, the bundled policy's sha256, training command and time, the validation curve and the test result).
An adapter of an OpenVLA-OFT policy also holds the heads trained whole beside the LoRA, in OFT's files
(``action_head--latest_checkpoint.pt``, ``proprio_projector--latest_checkpoint.pt``, float32); its default base is the
bundled OFT-style policy, or the MetaWorld policy for an adapter its record says was trained on it (made by
``vla_scripts/train_metaworld_policy.py --lora_rank``: :mod:`prismatic_tr.policy.metaworld_lora`). ``scripts/finetune_reduced.sh`` makes and installs one; :func:`load_adapted_policy` gives
the reduced policy::

    vla, processor = load_adapted_policy("vision-diverse-0.1-0.25")      # bundled policy + adapter + reduction
    action = vla.predict_action(image, prompt, unnorm_key=UNNORM_KEY)

    python -m prismatic_tr.policy.adapters install <checkpoint> <dest> [--results <finetune_reduced output dir>] [--base <dir>]

Paths are taken from the working directory; a bad one exits with status 2 and one line. Loading refuses a base
whose weights are not the ones the record names (``allow_other_base=True`` to load it anyway).
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

from prismatic_tr.models.family import family_of
from prismatic_tr.models.oft_checkpoint import component_files, read_component
from prismatic_tr.policy.bundled import (
    BUNDLED_METAWORLD_POLICY_DIR,
    BUNDLED_POLICY_DIR,
    bundled_oft_policy_dir,
    bundled_policy_dir,
)

ADAPTERS_DIR = BUNDLED_POLICY_DIR.parent / "adapters"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
SETTING_FILE, RECORD_FILE = "token_reduction.json", "record.json"


# where a checkpoint's weights live, in the order loaders look: a sharded checkpoint's index (and the shards it
# names) before a single file, safetensors before pickles
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def base_weight_files(base_dir: Path) -> list[Path]:
    """The files that hold a checkpoint's weights: ``<name>.index.json`` and every shard it names (sorted), or
    the single ``model.safetensors`` / ``pytorch_model.bin``; ValueError naming what is missing."""
    base_dir = Path(base_dir)
    if not base_dir.is_dir():
        raise ValueError(f"base {str(base_dir)!r} is not a directory; use a checkpoint directory (default: the "
                         "bundled policy)")
    for name in WEIGHT_FILES:
        index = base_dir / f"{name}.index.json"
        if index.is_file():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (json.JSONDecodeError, KeyError, AttributeError, TypeError) as err:
                raise ValueError(f"{str(index)!r} is not a weights index (needs a 'weight_map'): {err}") from None
            missing = [s for s in shards if not (base_dir / s).is_file()]
            if missing:
                raise ValueError(f"{str(index)!r} names shards that are missing: {missing}")
            return [index, *(base_dir / s for s in shards)]
        if (base_dir / name).is_file():
            return [base_dir / name]
    raise ValueError(f"base {str(base_dir)!r} holds no weights: none of {list(WEIGHT_FILES)} nor their .index.json")


def base_sha256(base_dir: str | Path) -> str:
    """The fingerprint of a checkpoint's weights that an adapter's record keeps: the sha256 of its one weights
    file; for a sharded checkpoint, the sha256 of the lines ``<file> <sha256>`` of the index and every shard."""
    files = base_weight_files(Path(base_dir))
    if len(files) == 1:
        return sha256_of(files[0])
    digest = hashlib.sha256()
    for f in files:
        digest.update(f"{f.name} {sha256_of(f)}\n".encode())
    return digest.hexdigest()


def check_base(adapter: Path, record: dict[str, Any], base_dir: Path, allow_other_base: bool = False) -> None:
    """ValueError unless ``base_dir``'s weights are the ones the adapter's record says it was trained on (both
    hashes named), or the record has no hash; ``allow_other_base=True`` loads it anyway."""
    found = base_sha256(base_dir)  # also: ValueError when the base holds no weights, whatever allow_other_base
    expected = record.get("base_sha256")
    if allow_other_base or found == expected:
        return
    if not expected:
        raise ValueError(f"the adapter {str(adapter)!r} records no base_sha256 in {RECORD_FILE}, so nothing says "
                         f"{str(base_dir)!r} (sha256 {found}) is the policy it was trained on; pass "
                         "allow_other_base=True to load it anyway")
    raise ValueError(f"the adapter {str(adapter)!r} was trained on a base with weights sha256 {expected}, and "
                     f"{str(base_dir)!r} has sha256 {found}; load it on that base, or pass allow_other_base=True "
                     "to load it on other weights")


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


def default_base(name_or_dir: str | Path) -> Path:
    """The bundled policy an adapter loads on by default: the one whose weights its record names (the MetaWorld
    policy's adapters), else the OFT-style one for an adapter with OFT's heads, else the OpenVLA-style one."""
    path = adapter_dir(name_or_dir)
    expected = read_adapter(path)[1].get("base_sha256")
    if expected and BUNDLED_METAWORLD_POLICY_DIR.is_dir() and base_sha256(BUNDLED_METAWORLD_POLICY_DIR) == expected:
        return BUNDLED_METAWORLD_POLICY_DIR
    return bundled_oft_policy_dir() if component_files(path) else bundled_policy_dir()


def load_adapted_policy(name_or_dir: str | Path, base: str | Path | None = None, apply_reduction: bool = True,
                        dtype: torch.dtype | None = None, device: str | torch.device = "cpu",
                        allow_other_base: bool = False) -> tuple[Any, Any]:
    """(vla, processor): the base policy (default: the bundled one) with the adapter merged in and, with
    ``apply_reduction``, the adapter's setting attached (``prismatic_tr.vla.apply_token_reduction_from_config``);
    without it, no reduction is attached and ``vla.config.token_reduction`` is None.

    ValueError, before anything loads, when the base is not the policy the adapter was trained on (the record's
    :func:`base_sha256`: the weights file, or a sharded checkpoint's index and every shard) or the adapter records
    no base at all, so an adapter never silently lands on other weights; ``allow_other_base=True`` loads it anyway.
    """
    for name, flag in (("apply_reduction", apply_reduction), ("allow_other_base", allow_other_base)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name}={flag!r} is not allowed; use True or False")
    try:
        from peft import PeftModel
    except ImportError as err:
        raise ImportError("load_adapted_policy needs peft: pip install 'prismatic_tr[train]'") from err

    from prismatic_tr.models import load_vla
    from prismatic_tr.vla import apply_token_reduction_from_config

    path = adapter_dir(name_or_dir)
    setting, record = read_adapter(path)
    heads = component_files(path)  # an OFT policy's adapter
    base_dir = Path(base) if base is not None else default_base(path)
    check_base(path, record, base_dir, allow_other_base)
    vla, processor = load_vla(base_dir, dtype=dtype, device=device)
    if bool(heads) != family_of(vla).chunked:
        kinds = ("an OpenVLA-OFT policy", "an OpenVLA policy")
        raise ValueError(f"the adapter {str(path)!r} is for {kinds[not heads]}, and the base {str(base_dir)!r} is "
                         f"{kinds[bool(heads)]}")
    merged = PeftModel.from_pretrained(vla, str(path), config=lora_config(path)).merge_and_unload()
    for name, file in heads.items():  # trained whole beside the LoRA
        head = getattr(merged, name)
        head.load_state_dict({k: v.to(next(head.parameters()).dtype) for k, v in read_component(file).items()})
    merged.config.token_reduction = setting if apply_reduction else None
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
    and unreduced, Wilson 95 %); ValueError naming a results file that is not an ``eval_policy.py`` one."""
    def rows(f: Path) -> dict[str, Any]:
        keep = ("setting", "successes", "episodes", "success_rate", "success_ci_low", "success_ci_high")
        try:
            data = json.loads(f.read_text())
            return {"split": data["meta"]["split"], "seeds": data["meta"]["seeds"],
                    "command": data["meta"]["command"], "records": [{k: r[k] for k in keep} for r in data["records"]]}
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise ValueError(f"{str(f)!r} is not an eval_policy.py results file ({type(err).__name__}: {err})") from None
    out: dict[str, Any] = {"validation": {}, "test": None}
    for f in sorted(results_dir.glob("eval_val_step_*/results.json")):
        out["validation"][f.parent.name.removeprefix("eval_val_")] = rows(f)
    if (results_dir / "eval_test" / "results.json").is_file():
        out["test"] = rows(results_dir / "eval_test" / "results.json")
    wall = results_dir / "training_wall.txt"
    if wall.is_file():
        out["training_wall"] = wall.read_text().strip()
    return out


def _trained_on(training_config: str | None, checkpoint: Path) -> Path:
    """The ``vla_path`` of a run's ``config.yaml`` (the bundled policy when there is none), absolute: a relative
    one is found from the working directory, else from the nearest folder above ``checkpoint`` that holds it (the
    folder the run was started in); ValueError when neither does."""
    import yaml

    vla_path = (yaml.safe_load(training_config) or {}).get("vla_path") if training_config else None
    if not vla_path:
        return bundled_policy_dir()
    path = Path(vla_path)
    if path.is_absolute():
        candidates = [path]
    else:
        candidates = [Path.cwd() / path, *(parent / path for parent in checkpoint.parents)]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    raise ValueError(f"the run's vla_path {vla_path!r} (config.yaml) is not a directory from the working directory "
                     f"nor from any folder above {str(checkpoint)!r}; pass the base it was trained on (--base)")


def _resolved(path: str | Path, what: str, must_be_dir: bool = True) -> Path:
    """``path`` made absolute from the working directory; ValueError naming it when it must exist and does not."""
    if isinstance(path, str) and not path.strip():
        raise ValueError(f"{what}={path!r} is not allowed; use a directory path")
    resolved = Path(path).expanduser().resolve()
    if must_be_dir and not resolved.is_dir():
        raise ValueError(f"{what} {str(path)!r} is not a directory (resolved to {str(resolved)!r})")
    return resolved


def install_adapter(checkpoint: str | Path, dest: str | Path, results_dir: str | Path | None = None,
                    base: str | Path | None = None) -> Path:
    """Copy a fine-tuning checkpoint's adapter (weights to float16), its reduction setting (a learned scorer as
    trained) and a record into ``dest``. Relative paths are taken from the working directory. ``base``: the policy
    it was trained on (default: the run's ``vla_path``), whose :func:`base_sha256` the record keeps. ValueError,
    before anything is written, on a path that is not there, or when ``checkpoint`` has no adapter or no reduction
    setting."""
    from safetensors.torch import load_file, save_file

    ckpt = _resolved(checkpoint, "checkpoint")
    dest = _resolved(dest, "dest", must_be_dir=False)
    if dest.exists() and not dest.is_dir():
        raise ValueError(f"dest {str(dest)!r} is a file; use a directory (it is created when missing)")
    results = _resolved(results_dir, "--results") if results_dir is not None else None
    src = ckpt / "adapter"
    config = json.loads((ckpt / "config.json").read_text()) if (ckpt / "config.json").is_file() else {}
    setting = config.get("token_reduction")
    if not all((src / f).is_file() for f in ADAPTER_FILES) or not setting:
        raise ValueError(f"checkpoint {str(ckpt)!r} needs adapter/{ADAPTER_FILES} and a config.json with "
                         "token_reduction (a vla_scripts/finetune.py LoRA checkpoint trained under a reduction)")
    run_dir = ckpt.parents[1]
    training_config = (run_dir / "config.yaml").read_text() if (run_dir / "config.yaml").is_file() else None
    base = _resolved(base, "base") if base is not None else _trained_on(training_config, ckpt)
    record: dict[str, Any] = {
        "source_checkpoint": str(ckpt), "base": str(base), "base_sha256": base_sha256(base),
        "policy": "openvla-oft" if component_files(ckpt) else "openvla",
        "training_config": training_config, "weights_dtype": "float16",
    }
    if results is not None:
        record.update(_summaries(results))
    dest.mkdir(parents=True, exist_ok=True)
    for file in component_files(ckpt).values():  # an OFT policy's heads, trained whole
        shutil.copy(file, dest / file.name)
    shutil.copy(src / "adapter_config.json", dest / "adapter_config.json")
    weights = {k: v.to(torch.float16).contiguous() for k, v in load_file(str(src / "adapter_model.safetensors")).items()}
    save_file(weights, str(dest / "adapter_model.safetensors"))
    (dest / SETTING_FILE).write_text(json.dumps(setting, indent=2) + "\n")
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
    inst.add_argument("--base", default=None, help="the policy it was trained on (default: the run's vla_path)")
    sub.add_parser("list", help="the shipped adapters")
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            print(f"installed {install_adapter(args.checkpoint, args.dest, args.results, args.base)}")
        else:
            print("\n".join(shipped_adapters()))
    except (ValueError, OSError) as err:  # one line, no traceback: a path that is not there, a disk that is full
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
