"""Inference methods shared by the reference model and the adapter over Hugging Face OpenVLA.

``OpenVLAInferenceMixin`` needs only what both models have: ``vision_backbone``, ``projector``,
``language_model`` (a ``LlamaForCausalLM``), ``get_input_embeddings()``, ``norm_stats``,
``action_tokenizer`` and ``empty_token_id``. Images go in once per call; token counts come from tensors.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .action_tokenizer import unnormalize_actions
from .config import IGNORE_INDEX
from .generation import (
    GenerateOutput,
    decode_loop,
    prefill,
    to_left_padding,
    to_right_padding,
    validate_generation_args,
)


class OpenVLAInferenceMixin:
    """``embed_images``, ``build_multimodal_inputs``, ``generate``, ``predict_action`` and helpers."""

    # --- multimodal pieces ---
    def embed_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> projected patches (B, K, llm_dim). Calls the backbone module, so hooks run."""
        return self.projector(self.vision_backbone(pixel_values))

    def build_multimodal_inputs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        projected: torch.Tensor,
        labels: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Insert the K = projected.shape[1] patches right after BOS (position 0), as OpenVLA.

        Args:
            input_ids: (B, L), BOS first (no left padding); attention_mask, labels: (B, L) or None.
            projected: (B, K, llm_dim).
        Returns:
            inputs_embeds (B, L + K, llm_dim), attention_mask (B, L + K) or None, labels (B, L + K) or None
            with IGNORE_INDEX at the patch positions.
        """
        if projected.shape[0] != input_ids.shape[0]:
            raise ValueError(
                f"batch of images {projected.shape[0]} != batch of input_ids {input_ids.shape[0]}"
            )
        text = self.get_input_embeddings()(input_ids)
        batch, k = projected.shape[0], projected.shape[1]
        embeds = torch.cat([text[:, :1], projected.to(text.dtype), text[:, 1:]], dim=1)
        mask = None
        if attention_mask is not None:
            patch_mask = attention_mask.new_ones((batch, k))
            mask = torch.cat([attention_mask[:, :1], patch_mask, attention_mask[:, 1:]], dim=1)
        if labels is not None:
            patch_labels = labels.new_full((batch, k), IGNORE_INDEX)
            labels = torch.cat([labels[:, :1], patch_labels, labels[:, 1:]], dim=1)
        return embeds, mask, labels

    # --- generation ---
    def prepare_prefill(
        self, input_ids: torch.Tensor, pixel_values: torch.Tensor | None, attention_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Prompt embeddings (B, T, D) and mask (B, T) or None; T = L + K with an image.

        Accepts left- or right-padded prompts: rows are right-aligned (BOS at position 0) for the patch
        insertion; :func:`prefill` left-aligns them for decoding. Runs the vision backbone once.
        """
        if attention_mask is not None:
            attention_mask, input_ids = to_right_padding(attention_mask, input_ids)
        if pixel_values is None:
            embeds = self.get_input_embeddings()(input_ids)
        else:
            projected = self.embed_images(pixel_values)
            embeds, attention_mask, _ = self.build_multimodal_inputs(input_ids, attention_mask, projected)
        return embeds, attention_mask

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        pixel_values: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        max_new_tokens: int = 7,
        do_sample: bool = False,
        temperature: float = 1.0,
        return_logits: bool = False,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor | GenerateOutput:
        """Prefill the (multimodal) prompt once, then decode one token per step with the KV cache.

        Args:
            input_ids: (B, L), left- or right-padded when ``attention_mask`` marks padding.
            pixel_values: (B, C, H, W) or None (text only).
        Returns:
            (B, L + new) ids (prompt ids left-aligned when padded), or ``GenerateOutput`` with the
            float32 logits (B, new, V) of each step when ``return_logits``.
        """
        validate_generation_args(max_new_tokens, do_sample, temperature)
        embeds, mask = self.prepare_prefill(input_ids, pixel_values, attention_mask)
        first_logits, state = prefill(self.language_model, embeds, mask)
        new, logits = decode_loop(
            self.language_model,
            first_logits,
            state,
            max_new_tokens,
            do_sample,
            temperature,
            generator,
            keep_logits=return_logits,
        )
        prompt = input_ids if attention_mask is None else to_left_padding(attention_mask, input_ids)[1]
        sequences = torch.cat([prompt, new], dim=1)
        return GenerateOutput(sequences, logits) if return_logits else sequences

    # --- actions ---
    def append_empty_token(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Append ``empty_token_id`` (if set) as a real token: (B, L) -> (B, L + 1); padding is handled by
        the alignment in :meth:`generate`. No data-dependent check (OpenVLA's prompt never ends with it)."""
        if self.empty_token_id is None:
            return input_ids, attention_mask
        extra = torch.full_like(input_ids[:, :1], self.empty_token_id)
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
        return torch.cat([input_ids, extra], dim=1), attention_mask

    def _check_unnorm_key(self, unnorm_key: str | None) -> str:
        keys = sorted(self.norm_stats)
        if unnorm_key is None:
            if len(keys) != 1:
                raise ValueError(f"unnorm_key=None but the model has statistics for {keys}; pass one of them")
            return keys[0]
        if unnorm_key not in self.norm_stats:
            raise ValueError(f"Unknown unnorm_key {unnorm_key!r}; allowed: {keys}")
        return unnorm_key

    def get_action_dim(self, unnorm_key: str | None = None) -> int:
        """Dimensionality of the action space of dataset ``unnorm_key``."""
        return len(self.norm_stats[self._check_unnorm_key(unnorm_key)]["action"]["q01"])

    def get_action_stats(self, unnorm_key: str | None = None) -> dict[str, Any]:
        """The "action" statistics (q01, q99, mask, ...) of dataset ``unnorm_key``."""
        return self.norm_stats[self._check_unnorm_key(unnorm_key)]["action"]

    @torch.no_grad()
    def predict_action(
        self,
        input_ids: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        unnorm_key: str | None = None,
        attention_mask: torch.Tensor | None = None,
        do_sample: bool = False,
        **kwargs: Any,
    ) -> np.ndarray:
        """Generate ``action_dim`` tokens, map them to bin centres and un-normalise with q01/q99 and mask.

        Returns:
            np.ndarray (A,) for a batch of one, (B, A) otherwise. ``kwargs``: temperature, generator.
        When ``self.empty_token_id`` is set (HF OpenVLA: 29871), that token is appended after the last real
        token of every row first, as OpenVLA does (the reference model sets None: its tokenizer has none).
        """
        if input_ids is None or pixel_values is None:
            raise ValueError("predict_action needs input_ids and pixel_values")
        input_ids, attention_mask = self.append_empty_token(input_ids, attention_mask)
        key = self._check_unnorm_key(unnorm_key)
        dim = self.get_action_dim(key)
        seqs = self.generate(
            input_ids,
            pixel_values,
            attention_mask=attention_mask,
            max_new_tokens=dim,
            do_sample=do_sample,
            **kwargs,
        )
        ids = seqs[:, -dim:].cpu().numpy()
        actions = unnormalize_actions(
            self.action_tokenizer.decode_token_ids_to_actions(ids), self.get_action_stats(key)
        )
        return actions[0] if actions.shape[0] == 1 else actions
