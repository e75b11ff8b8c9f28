"""The one spec grammar of a reduction setting, used by the API, training, benchmarks and evaluation.

A :class:`Setting` is the unreduced baseline or one site's reduction (``projector`` method x ratio, or ``vision`` / ``llm`` with a depth
fraction), optionally combined with further sites (``also``). On the command line a setting is a spec::

    topk_magnitude:0.5                      projector site: method and fraction kept
    spatial_pool:2x2                        projector site: 2 x 2 windows
    vision:attention:0.25@0.3               inside the vision towers after 30 % of their depth, keep 25 %
    llm:attention:0.5@0.25                  inside the LLM before layer round(0.25 * layers), keep 50 %
    vision:attention:0.5@0.3+llm:attention:0.5@0.25      both sites together
    random:0.5:compact                      kept tokens renumbered 1 .. K (v0.2), for comparison
    own                                     (eval_policy.py) the setting the checkpoint or adapter carries, a
                                            learned selection's trained scorer included

Each part is a :class:`prismatic_tr.vla.TokenReductionSettings` (:meth:`Setting.reductions`); its label is that
settings' ``label`` (one format, :func:`prismatic_tr.vla.settings.spec_label`). Light on imports (the reducers and
the settings dataclass only), so a command line can validate flags before building a model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prismatic_tr.reducers import available_methods
from prismatic_tr.vla.settings import POOL_METHOD, TokenReductionSettings, family_label, spec_label

BASELINE = "none"


@dataclass(frozen=True)
class Setting:
    """One benchmarked configuration; ``method == "none"`` is the unreduced baseline. ``site`` and
    ``depth_fraction`` and ``positions`` as in :class:`prismatic_tr.vla.TokenReductionSettings`; ``also``: further
    sites applied together with this one."""

    method: str
    reduction_ratio: float
    spatial_merge_size: int = 1
    site: str = "projector"
    depth_fraction: float | None = None
    also: tuple[Setting, ...] = ()
    positions: str = "original"
    scorer: tuple[float, ...] | None = None  # a learned selection's trained scorer (``setting_of`` a checkpoint's)

    @property
    def is_baseline(self) -> bool:
        return self.method == BASELINE

    @property
    def parts(self) -> tuple[Setting, ...]:
        """This site and the ones combined with it."""
        return (self, *self.also) if not self.is_baseline else ()

    @property
    def label(self) -> str:
        """The spec this setting is written as (see the module docstring); "none" for the baseline."""
        return "+".join(_part_label(p) for p in self.parts) if not self.is_baseline else BASELINE

    @property
    def family(self) -> str:
        """The label without the amounts kept: what a curve over ratios shares (``topk_magnitude``,
        ``vision:attention@0.3``, ``vision:attention@0.3+llm:attention@0.25``); "none" for the baseline."""
        if self.is_baseline:
            return BASELINE
        return "+".join(family_label(p.site, p.method, p.depth_fraction, p.positions) for p in self.parts)

    def reductions(self, seed: int = 0) -> list[Any]:
        """The :class:`prismatic_tr.vla.TokenReductionSettings` to attach, one per site (validated)."""
        return [TokenReductionSettings(p.method, p.reduction_ratio, max(1, p.spatial_merge_size), seed=seed,
                                       site=p.site, depth_fraction=p.depth_fraction, positions=p.positions,
                                       scorer=list(p.scorer) if p.scorer is not None else None)
                for p in self.parts]


def setting_of(reductions: Sequence[Any]) -> Setting:
    """The :class:`Setting` of stored :class:`prismatic_tr.vla.TokenReductionSettings` (a checkpoint's
    ``config.token_reduction``, one per site), a learned scorer's values included; ValueError for none."""
    if not reductions:
        raise ValueError("no token reduction is stored there (config.token_reduction is empty)")
    parts = [Setting(r.method, r.reduction_ratio, r.spatial_merge_size if r.method == POOL_METHOD else 1, r.site,
                     r.depth_fraction, positions=r.positions, scorer=tuple(r.scorer) if r.scorer else None)
             for r in reductions]
    return Setting(**{**parts[0].__dict__, "also": tuple(parts[1:])})


def _part_label(p: Setting) -> str:
    return spec_label(p.site, p.method, p.reduction_ratio, p.spatial_merge_size, p.depth_fraction, p.positions)


def _parse_part(spec: str) -> Setting:
    fields = spec.strip().split(":")
    positions = "original"
    if len(fields) > 2 and fields[-1] in ("compact", "original"):
        positions = fields.pop()
    site = fields[0] if fields[0] in ("projector", "vision", "llm") else "projector"
    rest = fields[1:] if fields[0] == site else fields
    if len(rest) != 2:
        raise ValueError(f"setting {spec!r} is not [site:]method:ratio[@depth] (e.g. topk_magnitude:0.5, "
                         "spatial_pool:2x2, vision:attention:0.25@0.3, llm:attention:0.5@0.25)")
    method, amount = rest
    depth = None
    if "@" in amount:
        amount, depth_text = amount.split("@", 1)
        depth = _number(depth_text, spec)
    if site == "projector" and method == POOL_METHOD:
        size = amount.lower().split("x")
        if len(size) != 2 or size[0] != size[1] or not size[0].isdigit():
            raise ValueError(f"setting {spec!r}: spatial_pool takes a window like 2x2")
        merge = int(size[0])
        return Setting(method, 1.0 / (merge * merge), merge, site, depth, positions=positions)
    return Setting(method, _number(amount, spec), 1, site, depth, positions=positions)


def _number(text: str, spec: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"setting {spec!r}: {text!r} is not a number") from None


def parse_setting(spec: str) -> Setting:
    """A setting from its spec (module docstring); ValueError naming what is wrong, checked in full now."""
    if spec.strip() == BASELINE:
        return Setting(BASELINE, 1.0)
    parts = [_parse_part(p) for p in spec.split("+")]
    sites = [p.site for p in parts]
    if len(set(sites)) != len(sites) or ("projector" in sites and "vision" in sites):
        raise ValueError(f"setting {spec!r}: sites {sites}; combine the llm site with one of projector / vision")
    setting = Setting(**{**parts[0].__dict__, "also": tuple(parts[1:])})
    setting.reductions()  # validates method, ratio and depth per site
    return setting


def build_settings(
    methods: Sequence[str], ratios: Sequence[float], spatial_merge_size: int | Sequence[int] = 2
) -> list[Setting]:
    """Baseline first, then each method x ratio; ``spatial_pool`` once per merge size (ratio 1/s**2).

    ``ValueError`` names an unknown method, a ratio outside (0, 1] or a merge size below 1.
    """
    allowed = available_methods()
    for m in methods:
        if m not in allowed:
            raise ValueError(f"unknown reduction method {m!r}; allowed: {', '.join(allowed)}")
    for r in ratios:
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 < float(r) <= 1.0:
            raise ValueError(f"reduction ratio {r!r} is not allowed; it is the fraction of tokens kept, in (0, 1]")
    merges = [spatial_merge_size] if isinstance(spatial_merge_size, int) else list(spatial_merge_size)
    if not merges or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in merges):
        raise ValueError(f"spatial_merge_size={spatial_merge_size!r} is not allowed; use integers >= 1")
    if any(m != POOL_METHOD for m in methods) and not ratios:
        raise ValueError("ratios is empty; give at least one fraction of tokens to keep, in (0, 1]")
    settings = [Setting(BASELINE, 1.0)]
    for m in methods:
        if m == POOL_METHOD:
            settings += [Setting(m, 1.0 / (s * s), s) for s in merges]
        else:
            settings += [Setting(m, float(r), merges[0]) for r in ratios]
    return list(dict.fromkeys(settings))  # drop repeats, keep order


def patch_grid(timm_model_ids: Sequence[str], image_sizes: Sequence[int],
               vision_specs: Sequence[Mapping[str, Any] | None] | None = None) -> tuple[int, int] | None:
    """(rows, cols) of the patch grid the vision tower(s) emit, from a model config's fields, or None when
    it cannot be told (no patch size in a spec or a ``patch<P>`` in the timm id, or towers that disagree).

    Patch size from ``vision_specs[i]["patch_size"]`` if given, else from the id (``..._patch14_...``); the
    side from ``vision_specs[i]["img_size"]`` if given, else ``image_sizes[i]``.
    """
    grids = set()
    for i, (timm_id, size) in enumerate(zip(timm_model_ids, image_sizes, strict=False)):
        spec = (vision_specs[i] if vision_specs is not None and i < len(vision_specs) else None) or {}
        found = re.search(r"patch(\d+)", str(timm_id))
        patch = spec.get("patch_size", int(found.group(1)) if found else None)
        side = spec.get("img_size", size)
        if not isinstance(patch, int) or not isinstance(side, int) or patch < 1:
            return None
        grids.add((side // patch, side // patch))
    return grids.pop() if len(grids) == 1 else None


def grid_from_config(config: Mapping[str, Any]) -> tuple[int, int] | None:
    """:func:`patch_grid` of an OpenVLA-style ``config.json`` (``timm_model_ids``, ``image_sizes``,
    optional ``vision_specs``); None when those fields are missing."""
    ids, sizes = config.get("timm_model_ids"), config.get("image_sizes")
    if not ids or not sizes:
        return None
    return patch_grid(ids, sizes, config.get("vision_specs"))


def check_merge_sizes(merges: Sequence[int], grid: tuple[int, int], source: str) -> None:
    """``ValueError`` naming the first merge size that does not divide ``grid`` and the sizes that do."""
    rows, cols = grid
    bad = [s for s in merges if rows % s or cols % s]
    if bad:
        allowed = [s for s in range(1, min(rows, cols) + 1) if rows % s == 0 and cols % s == 0]
        raise ValueError(f"spatial_merge_size {bad[0]} does not divide the {rows}x{cols} patch grid of {source}; "
                         f"allowed: {', '.join(map(str, allowed))}")
