"""OpenVLA-OFT checkpoints whose LoRA is not merged yet: ``<dir>/lora_adapter`` beside the heads and statistics.

OFT's ``finetune.py`` saves its LoRA as a PEFT adapter in ``<checkpoint dir>/lora_adapter`` and merges it into the
base model only with ``--merge_lora_during_training`` (otherwise its ``merge_lora_weights_and_save.py`` does it
later, given ``--base_checkpoint``). Such a directory holds the adapter, ``action_head--*_checkpoint.pt``,
``proprio_projector--*_checkpoint.pt`` and ``dataset_statistics.json``, and no model weights: the native model
loads the base checkpoint (``base``, or the adapter's ``base_model_name_or_path`` when that is a local directory),
merges the adapter into the towers, projector and Llama with PEFT, and takes heads and statistics from the
directory. Every adapter tensor must land on a layer of the model and every LoRA layer PEFT made must get one:
a missing or unexpected key is a ValueError listing them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from torch import nn

from .checkpoint import _listing

# follows OpenVLA-OFT vla-scripts/merge_lora_weights_and_save.py (MIT, see NOTICE): the adapter's folder name.
LORA_ADAPTER = "lora_adapter"
ADAPTER_CONFIG = "adapter_config.json"


def unmerged_adapter(directory: str | os.PathLike) -> Path | None:
    """``<directory>/lora_adapter`` when it holds a PEFT adapter and the directory has no model weights of its own
    (an unmerged OFT checkpoint), else None."""
    d = Path(directory)
    adapter = d / LORA_ADAPTER
    has_weights = any(d.glob("*.safetensors")) or any(d.glob("pytorch_model*.bin"))
    return adapter if (adapter / ADAPTER_CONFIG).is_file() and not has_weights else None


def adapter_base(adapter: Path, base: str | os.PathLike | None) -> Path:
    """The base checkpoint the adapter was trained on: ``base``, else the adapter's ``base_model_name_or_path``;
    ValueError unless it is a local checkpoint directory (with config.json)."""
    recorded = json.loads((adapter / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    chosen = base if base is not None else recorded
    if chosen is None or not (Path(chosen) / "config.json").is_file():
        raise ValueError(f"{str(adapter.parent)!r} holds an unmerged LoRA adapter ({LORA_ADAPTER}/) and no model "
                         f"weights; its base checkpoint {str(chosen)!r} is not a local checkpoint directory (the "
                         f"adapter records {recorded!r}): pass base='/path/to/the/base/checkpoint'")
    return Path(chosen)


def merge_adapter_(weights: nn.Module, adapter: Path) -> None:
    """Merge the PEFT adapter at ``adapter`` into ``weights`` (the model's towers, projector and Llama, named as
    OpenVLA's), in place. ValueError listing adapter tensors that match no layer and layers that get none."""
    from peft import PeftModel
    from peft.utils import load_peft_weights

    saved = set(load_peft_weights(str(adapter), device="cpu"))
    wrapped = PeftModel.from_pretrained(weights, str(adapter))
    names = {k: k.replace(".default.", ".").replace(".default", "") for k in wrapped.state_dict()}
    lora = {v for k, v in names.items() if "lora_" in k}
    # PEFT also saves whole layers beside the LoRA (e.g. an LM head it counts as an embedding layer): they load too
    missing, unexpected = sorted(lora - saved), sorted(saved - set(names.values()))
    if missing or unexpected:
        parts = ([f"LoRA layers without saved weights: {_listing(missing)}"] if missing else []) + (
            [f"saved tensors matching no layer: {_listing(unexpected)}"] if unexpected else [])
        raise ValueError(f"the adapter {str(adapter)!r} does not match the base model: " + "; ".join(parts))
    wrapped.merge_and_unload()
