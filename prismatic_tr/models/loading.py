"""``load_vla``: an OpenVLA checkpoint, natively when possible, else through OpenVLA's remote code.

Native loading (:class:`NativeOpenVLA`) needs only the checkpoint files and works on every supported stack.
Checkpoints it cannot build (another model type, a non-Llama LLM) go through transformers' auto classes with
``trust_remote_code``; when that code cannot run on the installed versions (OpenVLA's needs transformers
4.40 and timm 0.9), the error says so in one line and names the way out.
"""

from __future__ import annotations

import os
import re
from typing import Any

import torch

from .adapter import OpenVLAAdapter
from .backbones import native_llm_problem
from .config import MODEL_TYPE
from .family import family_of
from .modeling import NativeOpenVLA, read_config_dict
from .oft import NativeOpenVLAOFT
from .oft_lora import adapter_base, unmerged_adapter
from .processor import PROCESSOR_CONFIG, PrismaticProcessor, build_processor

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
NATIVE_CHOICES = ("auto", True, False)


class RemoteCodeError(ValueError):
    """OpenVLA's remote code could not load or build the model on the installed stack."""


def native_problem(config: dict[str, Any]) -> str | None:
    """Why a ``config.json`` dict cannot be loaded natively (None when it can)."""
    if config.get("model_type") != MODEL_TYPE:
        return f"model_type {config.get('model_type')!r} is not {MODEL_TYPE!r}"
    return native_llm_problem(str(config.get("llm_backbone_id", "llama2-7b-pure")))


def load_native(path: str, dtype: torch.dtype | None, device: str | torch.device,
                oft: dict[str, Any] | None = None, base: str | os.PathLike | None = None) -> tuple[NativeOpenVLA, Any]:
    """A checkpoint directory -> (NativeOpenVLA, or NativeOpenVLAOFT for OpenVLA-OFT's layout, and the
    PrismaticProcessor from the directory's processor files, else the base's for an unmerged OFT adapter)."""
    unmerged = unmerged_adapter(path)
    if oft is not None or unmerged is not None or family_of(path, read_config_dict(path)).chunked:
        vla = NativeOpenVLAOFT.from_pretrained(path, torch_dtype=dtype, device=device, oft=oft, base=base)
        if unmerged is not None and not os.path.isfile(os.path.join(path, PROCESSOR_CONFIG)):
            path = str(adapter_base(unmerged, base))  # the processor files of the base
    else:
        vla = NativeOpenVLA.from_pretrained(path, torch_dtype=dtype, device=device)
    if os.path.isfile(os.path.join(path, PROCESSOR_CONFIG)):
        return vla, PrismaticProcessor.from_pretrained(path)
    if vla.config.prismatic_tr_preset is None:
        raise ValueError(f"{path!r} has no {PROCESSOR_CONFIG}: the image preprocessing and tokenizer are unknown")
    return vla, build_processor(vla.config)  # a preset saved without its processor


def _remote_error(path_or_id: str, err: Exception) -> RemoteCodeError:
    import timm
    import transformers

    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return RemoteCodeError(
        f"OpenVLA's remote code could not load {path_or_id!r} on transformers {transformers.__version__} / timm "
        f"{timm.__version__} ({type(err).__name__}: {first}); load it natively (load_vla(path, native=True), for "
        f"Llama-2 OpenVLA checkpoints) or use OpenVLA's pinned stack (STACK=openvla bash scripts/setup_env.sh)"
    )


def load_hf_openvla(
    path_or_id: str, dtype: torch.dtype | None, device: str | torch.device, trust_remote_code: bool
) -> tuple[Any, Any]:
    """The model through transformers' auto classes and the checkpoint's remote code.

    transformers < 5: ``AutoModelForVision2Seq``; transformers 5: ``AutoModelForImageTextToText``. Note: OpenVLA's
    remote code on transformers >= 4.50 drops the image inside ``generate`` (openvla/openvla#346); wrap the
    model in :class:`OpenVLAAdapter` (``reference_api=True``), whose decoding always consumes it.
    """
    import transformers
    from transformers import AutoProcessor

    auto_model = getattr(transformers, "AutoModelForVision2Seq", None) or transformers.AutoModelForImageTextToText
    auto_map = read_config_dict(path_or_id).get("auto_map", {}) if os.path.isdir(path_or_id) else None
    if auto_map is not None and auto_model.__name__ not in auto_map:
        raise _remote_error(path_or_id, LookupError(
            f"transformers {transformers.__version__} loads such models with {auto_model.__name__}, which the "
            f"checkpoint's auto_map does not name (it names {sorted(auto_map)})"))
    dtype_kw = "torch_dtype" if int(transformers.__version__.split(".")[0]) < 5 else "dtype"
    try:
        processor = AutoProcessor.from_pretrained(path_or_id, trust_remote_code=trust_remote_code)
        vla = auto_model.from_pretrained(path_or_id, **{dtype_kw: dtype or torch.float32}, low_cpu_mem_usage=True,
                                         trust_remote_code=trust_remote_code)
    except OSError as err:  # missing repo / no network / missing files
        raise FileNotFoundError(f"could not load OpenVLA checkpoint {path_or_id!r}: {err}") from err
    except (ImportError, AttributeError, TypeError, NotImplementedError, KeyError, RuntimeError, ValueError) as err:
        raise _remote_error(path_or_id, err) from err
    return vla.to(device).eval(), processor


def _local_snapshot(hub_id: str) -> str | None:
    """The directory of a hub id already in the local Hugging Face cache, or None."""
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(hub_id, local_files_only=True)
    except Exception:  # noqa: BLE001 (not cached, or no huggingface_hub: both mean "not here")
        return None


def local_checkpoint_dir(path_or_id: str | os.PathLike) -> str | None:
    """The local directory of a checkpoint: ``path_or_id`` itself when it is a directory, the snapshot of a Hugging
    Face id already in the local cache, else None."""
    path = os.fspath(path_or_id)
    if os.path.isdir(path):
        return path
    if _HUB_ID.match(path) and not os.path.isabs(path):
        return _local_snapshot(path)
    return None


def load_vla(
    path_or_id: str | os.PathLike,
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
    trust_remote_code: bool = True,
    reference_api: bool = False,
    native: bool | str = "auto",
    oft: dict[str, Any] | None = None,
    base: str | os.PathLike | None = None,
) -> tuple[Any, Any]:
    """Load ``(vla, processor)`` from a checkpoint directory or a Hugging Face id.

    native: "auto" (default) loads natively whenever the checkpoint is an OpenVLA one with a Llama-family LLM
        (``NativeOpenVLA`` + ``PrismaticProcessor``, no remote code, any supported stack), else through the
        remote code; True: natively or ValueError saying why not; False: through the remote code.
    dtype: default the checkpoint's ``torch_dtype``. reference_api: wrap a remote-code model in
        :class:`OpenVLAAdapter` (the native model's ``generate(return_logits=...)`` / ``predict_action``).

    OpenVLA-OFT checkpoints (OFT's layout: ``action_head--*_checkpoint.pt``, ``proprio_projector--*_checkpoint.pt``,
    ``dataset_statistics.json`` beside the model files) load natively as :class:`NativeOpenVLAOFT`, never through
    remote code; ``oft`` gives the settings the files do not hold (``platform``, ``num_images_in_input``,
    ``attention``, see :class:`~prismatic_tr.models.oft_config.OFTSettings`); given, it also marks a checkpoint
    without head files as OFT's (the discrete-token variant). An OFT directory whose LoRA is not merged yet
    (``lora_adapter/``, heads and statistics, no model weights; :mod:`.oft_lora`) loads ``base`` (default: the
    adapter's recorded base, if local) and merges the adapter natively.

    A path that does not exist and is no hub id raises FileNotFoundError; an existing path that is not a
    checkpoint directory raises ValueError; remote code that cannot run raises :class:`RemoteCodeError`.
    """
    if native not in NATIVE_CHOICES:
        raise ValueError(f"native={native!r} is not allowed; use one of {NATIVE_CHOICES}")
    path = os.fspath(path_or_id)
    if not os.path.exists(path):
        if not (_HUB_ID.match(path) and not os.path.isabs(path)):
            raise FileNotFoundError(f"{path!r} does not exist and is not a Hugging Face model id (owner/name)")
        path = _local_snapshot(path) or path
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ValueError(f"{path!r} is not a directory; pass a checkpoint directory or a Hugging Face model id")
        unmerged = unmerged_adapter(path) is not None
        config = {} if unmerged else read_config_dict(path)
        problem = None if unmerged else native_problem(config)
        if (oft is not None or unmerged or family_of(path, config).chunked) and (native is False or problem is not None):
            raise ValueError(f"{path!r} is an OpenVLA-OFT checkpoint; it loads natively only (native='auto' or True)"
                             + (f", which it cannot: {problem}" if problem else ""))
        if native is True and problem is not None:
            raise ValueError(f"{path!r} cannot be loaded natively: {problem}")
        if native is not False and problem is None:
            return load_native(path, dtype, device, oft, base)
    elif native is True or oft is not None:
        raise ValueError(f"{path!r} is not in the local Hugging Face cache; native loading (and OFT) needs the files")
    vla, processor = load_hf_openvla(path, dtype, device, trust_remote_code)
    return (OpenVLAAdapter(vla) if reference_api else vla), processor
