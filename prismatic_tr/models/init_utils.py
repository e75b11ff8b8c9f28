"""Cheap construction of big random models: parameters are created on the meta device, then materialised
directly on the target device and dtype with a simple seeded init (timm's truncated-normal init of the real
ViTs takes tens of seconds on two CPU cores). Buffers (e.g. Llama's rotary ``inv_freq``) are built normally.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

INIT_STD = 0.02
LAYERSCALE_INIT = 1e-5
POOL_SIZE = 16_777_213  # prime


def building_on_meta() -> bool:
    """True inside ``with torch.device("meta")`` (the default device for new tensors is meta)."""
    return torch.empty(0).device.type == "meta"


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Every parameter registered inside this context is moved to the meta device at registration.

    Construction runs with CPU as the default device (timm 0.9 calls ``.item()`` while building), so
    init code that runs after registration is a no-op on meta tensors. Not thread-safe.
    """
    original = nn.Module.register_parameter

    def register_on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        if param is not None and param.device.type != "meta":
            param = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        original(module, name, param)

    nn.Module.register_parameter = register_on_meta  # type: ignore[method-assign]
    try:
        with torch.device("cpu"):
            yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


def _fill_from_pool(out: torch.Tensor, pool: torch.Tensor, offset: int) -> None:
    """Copy consecutive values of ``pool`` into the flattened ``out``, starting at ``offset``, wrapping."""
    flat, pos = out.view(-1), 0
    while pos < flat.numel():
        take = min(flat.numel() - pos, pool.numel() - offset)
        flat[pos : pos + take].copy_(pool[offset : offset + take])
        pos, offset = pos + take, 0


def _init_value(name: str, out: torch.Tensor, pool: torch.Tensor, generator: torch.Generator) -> None:
    """Fill ``out`` in place: biases 0, norm weights 1, LayerScale 1e-5, everything else N(0, 0.02) values
    taken from a shared random pool at a random offset (much faster than drawing every value)."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf == "bias":
        out.zero_()
    elif leaf == "gamma":
        out.fill_(LAYERSCALE_INIT)
    elif leaf == "weight" and out.dim() == 1:
        out.fill_(1.0)
    else:
        offset = int(torch.randint(pool.numel(), (1,), generator=generator, device=pool.device))
        _fill_from_pool(out, pool, offset)


def materialize_parameters_(
    module: nn.Module, device: str | torch.device, dtype: torch.dtype, seed: int
) -> nn.Module:
    """Replace every meta parameter of ``module`` by a real one on ``device`` / ``dtype``, seeded init.

    Random values come from one pool of ``POOL_SIZE`` N(0, 0.02) draws (a length that no layer width
    divides), copied at a random offset per tensor: rows differ, values are reproducible from ``seed``.
    """
    device = torch.device(device)
    generator = torch.Generator(device=device).manual_seed(seed)
    pool = torch.empty(POOL_SIZE, device=device).normal_(0.0, INIT_STD, generator=generator).to(dtype)
    for mod_name, mod in module.named_modules():
        for name, param in list(mod._parameters.items()):
            if param is None or param.device.type != "meta":
                continue
            data = torch.empty(param.shape, device=device, dtype=dtype)
            _init_value(f"{mod_name}.{name}", data, pool, generator)
            mod._parameters[name] = nn.Parameter(data, requires_grad=param.requires_grad)
    return module


def sincos_2d(grid: int, dim: int) -> torch.Tensor:
    """(grid * grid, dim) fixed 2-D sine-cosine position embeddings (row-major patches), as MAE initialises
    ViTs: a quarter of the channels each for sin / cos of the column and of the row, geometric frequencies."""
    if dim % 4:
        raise ValueError(f"dim={dim} must be a multiple of 4 for 2-D sine-cosine embeddings")
    freqs = 1.0 / (10000 ** (torch.arange(dim // 4, dtype=torch.float64) / (dim // 4)))
    rows, cols = torch.meshgrid(torch.arange(grid, dtype=torch.float64), torch.arange(grid, dtype=torch.float64),
                                indexing="ij")
    parts = []
    for coord in (cols.flatten(), rows.flatten()):
        angles = coord[:, None] * freqs[None]
        parts += [angles.sin(), angles.cos()]
    return torch.cat(parts, dim=1).float()


@torch.no_grad()
def init_sincos_pos_embed_(towers: list[nn.Module]) -> None:
    """Set each timm tower's patch position embeddings to :func:`sincos_2d` (prefix-token rows left alone)."""
    for tower in towers:
        pos = tower.pos_embed
        grid = int(round(tower.patch_embed.num_patches ** 0.5))
        n = grid * grid
        pos[:, pos.shape[1] - n :] = sincos_2d(grid, pos.shape[2]).to(pos.dtype)
