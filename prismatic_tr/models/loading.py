"""``load_vla``: a reference checkpoint (this package) or a Hugging Face OpenVLA checkpoint (remote code)."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import torch

from .adapter import OpenVLAAdapter
from .config import MODEL_TYPE
from .modeling import CONFIG_NAME, ReferenceOpenVLA
from .processor import PROCESSOR_CONFIG, PrismaticProcessor, build_processor

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _local_model_type(path: str) -> str | None:
    """model_type in ``path``/config.json; raises ValueError for a path that is not a checkpoint directory."""
    if not os.path.isdir(path):
        raise ValueError(
            f"{path!r} is not a directory; pass a checkpoint directory or a Hugging Face model id"
        )
    cfg_path = os.path.join(path, CONFIG_NAME)
    if not os.path.isfile(cfg_path):
        raise ValueError(f"{path!r} has no {CONFIG_NAME}; it is not a model checkpoint directory")
    with open(cfg_path) as f:
        return json.load(f).get("model_type")


def load_reference(path: str, dtype: torch.dtype | None, device: str | torch.device) -> tuple[Any, Any]:
    """Reference checkpoint -> (ReferenceOpenVLA, PrismaticProcessor saved beside it or rebuilt)."""
    vla = ReferenceOpenVLA.from_pretrained(path, torch_dtype=dtype, device=device)
    if os.path.isfile(os.path.join(path, PROCESSOR_CONFIG)):
        return vla, PrismaticProcessor.from_pretrained(path)
    return vla, build_processor(vla.config)


def load_hf_openvla(
    path_or_id: str, dtype: torch.dtype | None, device: str | torch.device, trust_remote_code: bool
) -> tuple[Any, Any]:
    """The real OpenVLA through transformers' auto classes (remote code).

    transformers < 5: ``AutoModelForVision2Seq``; transformers 5: ``AutoModelForImageTextToText``.
    Note: OpenVLA's remote code on transformers >= 4.50 drops the image inside ``generate``
    (openvla/openvla#346); use the pinned transformers 4.40.1 for real checkpoints.
    """
    import transformers
    from transformers import AutoProcessor

    auto_model = (
        getattr(transformers, "AutoModelForVision2Seq", None) or transformers.AutoModelForImageTextToText
    )
    dtype_kw = "torch_dtype" if int(transformers.__version__.split(".")[0]) < 5 else "dtype"
    try:
        processor = AutoProcessor.from_pretrained(path_or_id, trust_remote_code=trust_remote_code)
        vla = auto_model.from_pretrained(
            path_or_id,
            **{dtype_kw: dtype or torch.float32},
            low_cpu_mem_usage=True,
            trust_remote_code=trust_remote_code,
        )
    except OSError as err:  # missing repo / no network / missing files
        raise FileNotFoundError(f"Could not load OpenVLA checkpoint {path_or_id!r}: {err}") from err
    return vla.to(device).eval(), processor


def load_vla(
    path_or_id: str | os.PathLike,
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
    trust_remote_code: bool = True,
    reference_api: bool = False,
) -> tuple[Any, Any]:
    """Load ``(vla, processor)``.

    ``reference_api=True`` wraps a Hugging Face OpenVLA model in :class:`OpenVLAAdapter` (the reference
    model's ``build_multimodal_inputs`` / ``generate(return_logits=...)`` / ``predict_action``).

    A directory whose config.json has model_type "prismatic_tr_openvla" loads as ``ReferenceOpenVLA``; any
    other checkpoint directory or a hub id (``owner/name``) goes through the HF OpenVLA path. A path that
    does not exist raises FileNotFoundError; an existing path that is not a checkpoint raises ValueError.
    """
    path = os.fspath(path_or_id)
    if os.path.exists(path):
        if _local_model_type(path) == MODEL_TYPE:
            return load_reference(path, dtype, device)
    elif not (_HUB_ID.match(path) and not os.path.isabs(path)):
        raise FileNotFoundError(f"{path!r} does not exist and is not a Hugging Face model id (owner/name)")
    vla, processor = load_hf_openvla(path, dtype, device, trust_remote_code)
    return (OpenVLAAdapter(vla) if reference_api else vla), processor
