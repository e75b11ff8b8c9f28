"""Inference methods shared by the native model and the adapter over Hugging Face OpenVLA.

``OpenVLAInferenceMixin`` needs only what both models have: ``vision_backbone``, ``projector``,
``language_model`` (a ``LlamaForCausalLM``), ``get_input_embeddings()``, ``norm_stats``,
``action_tokenizer``, ``empty_token_id`` and ``pad_token_id``. Images go in once per call; token counts come
from tensors. ``generate`` and ``predict_action`` read no tensor value on the host until the final copy of
the action tokens (see :mod:`prismatic_tr.models.prompt` and :mod:`prismatic_tr.models.generation`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .action_tokenizer import unnormalize_actions
from .config import IGNORE_INDEX
from .generation import GenerateOutput, decode_loop, prefill, validate_generation_args
from .prompt import Prompt, prepare_prompt


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
        # [projected, text] reordered to [BOS, projected, text[1:]] by one index_select: slicing the embedded
        # text and concatenating the slices miscompiles in torch 2.2's inductor (index out of bounds).
        dev = text.device
        order = torch.cat([torch.full((1,), k, device=dev), torch.arange(k, device=dev),
                           torch.arange(k + 1, k + text.shape[1], device=dev)])
        embeds = torch.cat([projected.to(text.dtype), text], dim=1).index_select(1, order)
        mask = None
        if attention_mask is not None:
            patch_mask = attention_mask.new_ones((batch, k))
            mask = torch.cat([attention_mask[:, :1], patch_mask, attention_mask[:, 1:]], dim=1)
        if labels is not None:
            patch_labels = labels.new_full((batch, k), IGNORE_INDEX)
            labels = torch.cat([labels[:, :1], patch_labels, labels[:, 1:]], dim=1)
        return embeds, mask, labels

    # --- generation ---
    def make_prompt(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, for_actions: bool) -> Prompt:
        """Real tokens first in every row, OpenVLA's empty token appended where missing when ``for_actions``."""
        append = self.empty_token_id if for_actions else None
        return prepare_prompt(input_ids, attention_mask, append, int(self.pad_token_id))

    def prepare_prefill(self, prompt: Prompt, pixel_values: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Prompt embeddings (B, T, D) and key mask (B, T) or None; T = L + K with an image. Runs the vision
        backbone once."""
        device = self.get_input_embeddings().weight.device
        ids = prompt.ids.to(device)
        mask = prompt.key_mask.to(device) if prompt.key_mask is not None else None
        if pixel_values is None:
            return self.get_input_embeddings()(ids), mask
        embeds, mask, _ = self.build_multimodal_inputs(ids, mask, self.embed_images(pixel_values))
        return embeds, mask

    @torch.no_grad()
    def generate_from_prompt(
        self,
        prompt: Prompt,
        pixel_values: torch.Tensor | None,
        max_new_tokens: int = 7,
        do_sample: bool = False,
        temperature: float = 1.0,
        return_logits: bool = False,
        generator: torch.Generator | None = None,
        cache: Any = None,
    ) -> torch.Tensor | GenerateOutput:
        """:meth:`generate` on a prepared :class:`Prompt`; the new tokens (B, new) or ``GenerateOutput``
        whose ``sequences`` hold only the new tokens. ``cache``: an empty KV cache for the prefill
        (:func:`~prismatic_tr.models.generation.ready_cache`), or None."""
        validate_generation_args(max_new_tokens, do_sample, temperature)
        embeds, mask = self.prepare_prefill(prompt, pixel_values)
        first_logits, state = prefill(self.language_model, embeds, mask, cache)
        new, logits = decode_loop(self.language_model, first_logits, state, max_new_tokens, do_sample, temperature,
                                  generator, keep_logits=return_logits)
        return GenerateOutput(new, logits) if return_logits else new

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
            (B, L' + new) ids: each row's real prompt tokens first, then the new tokens (rows of a padded batch
            are right-padded with ``pad_token_id`` before the new tokens; L' = longest prompt), or
            ``GenerateOutput`` with those sequences and the float32 logits (B, new, V) of each step.
        """
        prompt = self.make_prompt(input_ids, attention_mask, for_actions=False)
        out = self.generate_from_prompt(prompt, pixel_values, max_new_tokens, do_sample, temperature, return_logits,
                                        generator)
        new = out.sequences if isinstance(out, GenerateOutput) else out
        sequences = torch.cat([prompt.ids.to(new.device), new], dim=1)
        return GenerateOutput(sequences, out.logits) if isinstance(out, GenerateOutput) else sequences

    # --- actions ---
    def _check_unnorm_key(self, unnorm_key: str | None) -> str:
        keys = sorted(self.norm_stats or {})
        if unnorm_key is None:
            if len(keys) != 1:
                raise ValueError(f"unnorm_key=None but the model has statistics for {keys}; pass one of them")
            return keys[0]
        if unnorm_key not in keys:
            raise ValueError(f"Unknown unnorm_key {unnorm_key!r}; allowed: {keys}")
        return unnorm_key

    def get_action_dim(self, unnorm_key: str | None = None) -> int:
        """Dimensionality of the action space of dataset ``unnorm_key``."""
        return len(self.norm_stats[self._check_unnorm_key(unnorm_key)]["action"]["q01"])

    def get_action_stats(self, unnorm_key: str | None = None) -> dict[str, Any]:
        """The "action" statistics (q01, q99, mask, ...) of dataset ``unnorm_key``."""
        return self.norm_stats[self._check_unnorm_key(unnorm_key)]["action"]

    def actions_from_tokens(self, token_ids: np.ndarray, unnorm_key: str | None = None) -> np.ndarray:
        """(B, A) action token ids -> (B, A) un-normalised actions (bin centres, q01/q99 with the mask)."""
        normalized = self.action_tokenizer.decode_token_ids_to_actions(token_ids)
        return unnormalize_actions(normalized, self.get_action_stats(unnorm_key))

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

        As OpenVLA's ``predict_action``: the empty token (``empty_token_id``, 29871 for Llama-2 checkpoints) is
        appended after the last real token of every row unless it is already there, and greedy decoding is the
        default. Unlike OpenVLA's, a batch of several prompts (padded left or right) is allowed.

        Returns:
            np.ndarray (A,) for a batch of one, (B, A) otherwise. ``kwargs``: temperature, generator.
        """
        if input_ids is None or pixel_values is None:
            raise ValueError("predict_action needs input_ids and pixel_values")
        key = self._check_unnorm_key(unnorm_key)
        new = self.action_tokens(input_ids, pixel_values, attention_mask, self.get_action_dim(key), do_sample,
                                 **kwargs)
        return self.actions_on_host(new, key)

    def action_tokens(self, input_ids: torch.Tensor, pixel_values: torch.Tensor,
                      attention_mask: torch.Tensor | None, action_dim: int, do_sample: bool = False,
                      **kwargs: Any) -> torch.Tensor:
        """The part of :meth:`predict_action` that runs on the model's device: (B, action_dim) action token ids.
        No tensor value is read on the host (what a CUDA graph captures, :mod:`prismatic_tr.vla.cuda_graph`).
        ``kwargs``: temperature, generator, cache (:meth:`generate_from_prompt`)."""
        prompt = self.make_prompt(input_ids, attention_mask, for_actions=True)
        return self.generate_from_prompt(prompt, pixel_values, action_dim, do_sample, **kwargs)

    def actions_on_host(self, tokens: torch.Tensor, unnorm_key: str) -> np.ndarray:
        """The rest of :meth:`predict_action`: (B, A) token ids -> un-normalised actions, (A,) for a batch of
        one, (B, A) otherwise (the one copy to the host)."""
        actions = self.actions_from_tokens(tokens.cpu().numpy(), unnorm_key)
        return actions[0] if actions.shape[0] == 1 else actions
