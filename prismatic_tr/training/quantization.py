"""Load-time 4/8-bit quantization of a model's Linear layers with bitsandbytes (for QLoRA-style training).

The reference model is a plain ``nn.Module``, so transformers' bitsandbytes quantizer (which needs a
``PreTrainedModel`` and, on transformers 4.40, a GPU) cannot be used; instead every targeted ``nn.Linear``
is swapped for ``bnb.nn.Linear8bitLt`` (LLM.int8, threshold 6.0) or ``bnb.nn.Linear4bit`` (nf4), as
OpenVLA's ``BitsAndBytesConfig`` would, skipping the projector and the LM head (``llm_int8_skip_modules``).
Quantization happens when the layers are moved to the device. On a CPU, bitsandbytes >= 0.47 runs 8-bit;
4-bit needs every quantized layer's output size to be a multiple of 32, which is checked up front.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

# follows OpenVLA c8f03f48 vla-scripts/finetune.py (MIT, see NOTICE): its 4-bit BitsAndBytesConfig (nf4, bf16
# compute); leaving the projector and the LM head unquantized is this package's choice.
DEFAULT_SKIP = ("projector", "lm_head")


def quantizable_linears(model: nn.Module, skip: tuple[str, ...] = DEFAULT_SKIP) -> list[str]:
    """Names of the plain ``nn.Linear`` modules to quantize (names containing a ``skip`` part are left out)."""
    out = []
    for name, module in model.named_modules():
        if type(module) is nn.Linear and not any(part in skip for part in name.split(".")):
            out.append(name)
    return out


def check_quantization_supported(model: nn.Module, bits: int, device: torch.device, skip: tuple[str, ...] = DEFAULT_SKIP) -> None:
    """Raise ValueError (with the reason) when bitsandbytes cannot quantize ``model`` to ``bits`` on ``device``."""
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as exc:
        raise ValueError("use_quantization needs bitsandbytes: pip install 'prismatic_tr[quant]'") from exc
    if bits not in (4, 8):
        raise ValueError(f"quantization bits={bits} is not allowed; use 4 or 8")
    if bits == 4 and device.type == "cpu":
        bad = [n for n in quantizable_linears(model, skip) if model.get_submodule(n).out_features % 32]
        if bad:
            raise ValueError(
                f"4-bit quantization on the CPU needs every quantized Linear's output size to be a multiple of 32; "
                f"{len(bad)} are not (e.g. {bad[:3]}). Use quantization_bits=8 or a GPU"
            )


def _make_quantized(linear: nn.Linear, bits: int, compute_dtype: torch.dtype) -> nn.Module:
    import bitsandbytes as bnb

    weight = linear.weight.data.detach().to(torch.float16 if bits == 8 else compute_dtype).cpu()
    bias = linear.bias is not None
    if bits == 8:
        new: Any = bnb.nn.Linear8bitLt(linear.in_features, linear.out_features, bias=bias,
                                       has_fp16_weights=False, threshold=6.0)
        new.weight = bnb.nn.Int8Params(weight, requires_grad=False, has_fp16_weights=False)
    else:
        new = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=bias,
                                compute_dtype=compute_dtype, quant_type="nf4")
        new.weight = bnb.nn.Params4bit(weight, requires_grad=False, quant_type="nf4")
    if bias:
        new.bias = nn.Parameter(linear.bias.data.detach().to(compute_dtype).cpu(), requires_grad=False)
    return new


def quantize_linears(
    model: nn.Module,
    bits: int,
    device: torch.device,
    compute_dtype: torch.dtype = torch.float32,
    skip: tuple[str, ...] = DEFAULT_SKIP,
) -> list[str]:
    """Replace ``model``'s targeted Linear layers by bitsandbytes ones on ``device`` (in place); returns their names.

    Not undoable by design: this is a load-time step (merging is done on a freshly loaded float copy).
    """
    check_quantization_supported(model, bits, device, skip)
    names = quantizable_linears(model, skip)
    for name in names:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, _make_quantized(getattr(parent, child), bits, compute_dtype).to(device))
    return names
