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

A spec parses to a :class:`prismatic_tr.vla.settings.Setting`, the one setting type (one per site:
:meth:`Setting.reductions`), whose ``label`` is its spec again (:func:`prismatic_tr.vla.settings.spec_label`). Light
on imports (the reducers and the settings dataclass only), so a command line can validate flags before building a
model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from prismatic_tr.reducers import available_methods
from prismatic_tr.vla.settings import BASELINE, DEFAULT_MERGE_SIZE, POOL_METHOD, Setting


def setting_of(reductions: Sequence[Setting]) -> Setting:
    """The :class:`Setting` of stored settings (a checkpoint's ``config.token_reduction``, one per site) as its spec
    writes it (seed, keep_cls_token and num_queries at their defaults, the merge size only for ``spatial_pool``), a
    learned scorer's values included; ValueError for none."""
    if not reductions:
        raise ValueError("no token reduction is stored there (config.token_reduction is empty)")
    parts = [Setting(r.method, r.keep_ratio, r.spatial_merge_size if r.method == POOL_METHOD else DEFAULT_MERGE_SIZE,
                     r.site, r.depth_fraction, positions=r.positions, scorer=r.scorer) for r in reductions]
    return replace(parts[0], also=tuple(parts[1:]))


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
    return Setting(method, _number(amount, spec), site=site, depth_fraction=depth, positions=positions)


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
    return replace(parts[0], also=tuple(parts[1:]))  # validated in full by Setting


def build_settings(
    methods: Sequence[str], ratios: Sequence[float], spatial_merge_size: int | Sequence[int] = DEFAULT_MERGE_SIZE
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
            settings += [Setting(m, float(r)) for r in ratios]
    return list(dict.fromkeys(settings))  # drop repeats, keep order
