"""``OpenVLAAdapter``: the native model's inference API over a Hugging Face OpenVLA model (remote code).

The HF model keeps doing the work (its ``vision_backbone``, ``projector``, ``language_model``); the adapter
adds ``build_multimodal_inputs``, ``generate(..., return_logits=True)`` and ``predict_action`` from
:class:`OpenVLAInferenceMixin`. Its own decoding loop always consumes the image, also on transformers >= 4.50
where the remote code's ``generate`` silently drops it (openvla/openvla#346), and ``predict_action`` appends
OpenVLA's empty token 29871 like the original. Forward hooks on ``vision_backbone`` (token reduction) apply.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from .action_tokenizer import ActionTokenizer
from .backbones import LLAMA2_EMPTY_TOKEN_ID
from .inference import OpenVLAInferenceMixin

REQUIRED_ATTRIBUTES = ("vision_backbone", "projector", "language_model", "norm_stats", "vocab_size")


def _delegate(name: str) -> property:
    return property(lambda self: getattr(self.model, name), doc=f"The wrapped model's ``{name}``.")


class OpenVLAAdapter(OpenVLAInferenceMixin, nn.Module):
    """Wraps an OpenVLA-style model; ``vision_backbone`` etc. are the wrapped model's own modules.

    Args:
        model: HF ``OpenVLAForActionPrediction`` (or any model with ``REQUIRED_ATTRIBUTES``; ``vocab_size``
            is the unpadded vocabulary, e.g. 32000).
        empty_token_id: appended to prompts by ``predict_action`` (OpenVLA: 29871), or None.
    """

    vision_backbone = _delegate("vision_backbone")
    projector = _delegate("projector")
    language_model = _delegate("language_model")
    norm_stats = _delegate("norm_stats")
    config = _delegate("config")
    pad_token_id = _delegate("pad_token_id")

    def __init__(self, model: nn.Module, empty_token_id: int | None = LLAMA2_EMPTY_TOKEN_ID) -> None:
        missing = [a for a in REQUIRED_ATTRIBUTES if not hasattr(model, a)]
        if missing:
            raise ValueError(
                f"{type(model).__name__} lacks {missing}; OpenVLAAdapter needs {list(REQUIRED_ATTRIBUTES)}"
            )
        super().__init__()
        self.model = model
        self.empty_token_id = empty_token_id
        n_bins = int(getattr(getattr(model, "config", None), "n_action_bins", 256))
        self.action_tokenizer = ActionTokenizer(int(model.vocab_size), n_bins=n_bins)

    def get_input_embeddings(self) -> nn.Module:
        return self.model.get_input_embeddings()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The wrapped model's forward."""
        return self.model(*args, **kwargs)
