"""OpenVLA-OFT's modules beside OpenVLA's: the multi-image vision backbone, the proprio projector, the L1 head.

Module and parameter names follow OFT's (``prismatic/models/projectors.py`` ``ProprioProjector``,
``prismatic/models/action_heads.py`` ``L1RegressionActionHead`` / ``MLPResNet``), so the state dicts OFT saves
(``proprio_projector--*_checkpoint.pt``, ``action_head--*_checkpoint.pt``) load one to one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .oft_config import MAX_IMAGES
from .vision import NativeVisionBackbone


# follows OpenVLA-OFT 213c5ff8 prismatic/extern/hf/modeling_prismatic.py PrismaticVisionBackbone (MIT, see NOTICE):
# each image encoded by the towers on its own, patch tokens concatenated image after image, the image count set
# on the backbone, so OFT's get_num_patches() * get_num_images_in_input() counts the visual tokens.
class OFTVisionBackbone(NativeVisionBackbone):
    """OpenVLA's backbone taking ``n`` images per sample: (B, n * C, H, W) -> (B, n * N_patch, embed_dim), C = 3 per
    tower. ``n`` is :meth:`get_num_images_in_input` (set with :meth:`set_num_images_in_input`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.num_images_in_input = 1

    def get_num_images_in_input(self) -> int:
        """Images per sample the backbone encodes."""
        return self.num_images_in_input

    def set_num_images_in_input(self, num_images_in_input: int) -> None:
        """Set the images per sample (1 to 3)."""
        n = num_images_in_input
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_IMAGES:
            raise ValueError(f"num_images_in_input={n!r}; allowed: an int from 1 to {MAX_IMAGES}")
        self.num_images_in_input = n

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """(B, n * C, H, W) -> (B, n * N_patch, embed_dim): every image through the towers on its own, tokens
        concatenated in image order.

        The n images go through the towers as one batch of n * B rows (image-major: rows ``m * B + b``), where OFT's
        code loops over the images: each row is still one image (a reduction inside the towers selects per row, so
        per image), the result is the same up to float rounding, and every weight is read once per step instead of
        n times, which is what a reduced tower's late blocks are bound by on a CPU."""
        per_image = 3 * len(self.towers)
        n = self.num_images_in_input
        if pixel_values.dim() != 4 or pixel_values.shape[1] != n * per_image:
            raise ValueError(f"pixel_values has shape {tuple(pixel_values.shape)}; expected (B, {n * per_image}, H, W)"
                             f" for {n} image(s) of {per_image} channels (set_num_images_in_input changes n)")
        if n == 1:
            return super().forward(pixel_values)
        stacked = torch.cat(torch.split(pixel_values, per_image, dim=1), dim=0)    # (n * B, C, H, W)
        tokens = super().forward(stacked)                                          # (n * B, N, D)
        return torch.cat(torch.split(tokens, pixel_values.shape[0], dim=0), dim=1)  # (B, n * N, D)


# follows OpenVLA-OFT 213c5ff8 prismatic/models/projectors.py ProprioProjector (MIT, see NOTICE): layer names and order.
class ProprioProjector(nn.Module):
    """(B, proprio_dim) -> (B, llm_dim): fc1, GELU, fc2."""

    def __init__(self, llm_dim: int, proprio_dim: int) -> None:
        super().__init__()
        self.llm_dim, self.proprio_dim = llm_dim, proprio_dim
        self.fc1 = nn.Linear(proprio_dim, llm_dim)
        self.fc2 = nn.Linear(llm_dim, llm_dim)
        self.act_fn1 = nn.GELU()

    def forward(self, proprio: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act_fn1(self.fc1(proprio)))


class MLPResNetBlock(nn.Module):
    """x + ReLU(Linear(LayerNorm(x))), as ``ffn`` (LayerNorm, Linear, ReLU) of OFT's block."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.ffn = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.ffn(x)


# follows OpenVLA-OFT 213c5ff8 prismatic/models/action_heads.py MLPResNet (MIT, see NOTICE): names and order.
class MLPResNet(nn.Module):
    """(..., input_dim) -> (..., output_dim): LayerNorm, fc1, ReLU, residual blocks, LayerNorm, fc2."""

    def __init__(self, num_blocks: int, input_dim: int, hidden_dim: int, output_dim: int) -> None:
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(input_dim)
        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.relu = nn.ReLU()
        self.mlp_resnet_blocks = nn.ModuleList([MLPResNetBlock(hidden_dim) for _ in range(num_blocks)])
        self.layer_norm2 = nn.LayerNorm(hidden_dim)
        self.fc2 = nn.Linear(hidden_dim, output_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.fc1(self.layer_norm1(x)))
        for block in self.mlp_resnet_blocks:
            x = block(x)
        return self.fc2(self.layer_norm2(x))


# follows OpenVLA-OFT 213c5ff8 prismatic/models/action_heads.py L1RegressionActionHead (MIT, see NOTICE): the chunk
# step's action_dim slots' hidden states concatenated, then a 2-block MLPResNet.
class L1RegressionActionHead(nn.Module):
    """(B, chunk * action_dim, llm_dim) hidden states of the action slots -> (B, chunk, action_dim) actions in
    [-1, 1] (normalised)."""

    def __init__(self, llm_dim: int, hidden_dim: int, action_dim: int, num_actions_chunk: int) -> None:
        super().__init__()
        self.action_dim, self.num_actions_chunk = action_dim, num_actions_chunk
        self.model = MLPResNet(num_blocks=2, input_dim=llm_dim * action_dim, hidden_dim=hidden_dim,
                               output_dim=action_dim)

    def predict_action(self, actions_hidden_states: torch.Tensor) -> torch.Tensor:
        """(B, chunk * action_dim, D) -> (B, chunk, action_dim)."""
        b = actions_hidden_states.shape[0]
        return self.model(actions_hidden_states.reshape(b, self.num_actions_chunk, -1))

    def forward(self, actions_hidden_states: torch.Tensor) -> torch.Tensor:
        return self.predict_action(actions_hidden_states)
