"""The reduction settings a user picks for a VLA, and their round trip through ``vla.config``.

Three sites, each with its own validated settings (fractions of tokens and of depth, so one setting applies to
models of any size; a depth fraction rounds to a whole block or layer, so on shallow towers it cuts later than on
deep ones: ``vision`` at 0.25 cuts after 2 of the bundled policy's 5 tower blocks but after 6 of DINOv2-L's 23;
``prismatic_tr.vla.reduction_cut`` says where):

* ``projector``: between the vision backbone and the projector (``method`` one of the reducers, ``keep_ratio``
  kept, ``spatial_merge_size`` for ``spatial_pool``);
* ``vision``: inside the vision towers after ``depth_fraction`` of each tower's blocks, one selection shared by the
  towers (``method`` "attention", "norm", any selecting reducer, e.g. "diverse", or "learned", the diverse cover
  weighed by a scorer trained with the policy, whose weights ``scorer`` holds; ``keep_ratio`` kept);
* ``llm``: inside the language model before layer ``round(depth_fraction * layers)`` of the prefill (``method``
  "attention": what the last ``num_queries`` prompt positions attend to; ``keep_ratio`` kept).

``projector`` and ``vision`` both shrink what the backbone hands the projector and share one slot; ``llm``
combines with either. ``vla.config.token_reduction`` holds one settings dict, or a list when several sites are on.

``positions``: the sequence positions (RoPE ids) the kept visual tokens get in the language model.
``"original"`` (default, every site): the position each token has without reduction (BOS 0, patch ``i`` of image
``m`` at ``1 + m * P + i``, every text and generated token where it is without reduction; see
:mod:`prismatic_tr.llm.positions`). ``"compact"`` (``projector`` and ``vision`` only): the kept tokens numbered
``1 .. K`` and the text moved forward by ``N - K``, as v0.2 did; kept for comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from prismatic_tr.reducers import ReducerConfig
from prismatic_tr.reducers.config import check_fraction
from prismatic_tr.reducers.learned import LEARNED, check_scorer_values
from prismatic_tr.vit.shared import merges, scorings

CONFIG_KEY = "token_reduction"
SITES = ("projector", "vision", "llm")
POSITIONS = ("original", "compact")
SITE_METHODS: dict[str, tuple[str, ...]] = {"vision": scorings(), "llm": ("attention",)}
# Chosen on validation episodes: diverse's max-min cover keeps the small objects the task names, where the seed
# design's topk_magnitude / attention_score keep the background (benchmarks/results/selection/); diverse_merge keeps
# the same cover and folds every other token into its nearest kept one, and beats diverse at both sites on the
# validation episodes of the tabletop policy (selection/val_merge/, val_vision_merge/), the OFT-style one
# (oft_policy/val_merge/) and MetaWorld (metaworld/shipped/validation_proportional/, validation_vision_merge/).
DEFAULT_METHODS = {"projector": "diverse_merge", "vision": "diverse_merge", "llm": "attention"}
# The projector methods an evaluation sweeps unless told otherwise: the default first, diverse (the cover alone, the
# default in 0.5.0), then the seed design's four (topk_magnitude and attention_score keep the background and lose
# the task: docs/results/openvla.md).
SWEEP_METHODS = (DEFAULT_METHODS["projector"], "diverse", "topk_magnitude", "attention_score", "random",
                 "spatial_pool")
DEFAULT_DEPTH_FRACTION = 0.25
POOL_METHOD = "spatial_pool"
DEFAULT_MERGE_SIZE = 2  # spatial_pool's window side when none is given
BASELINE = "none"  # the method of the unreduced baseline
LEGACY_KEYS = {"reduction_ratio": "keep_ratio"}  # stored key -> field, read by Setting.from_dict only


def spec_label(site: str, method: str, keep_ratio: float, spatial_merge_size: int,
               depth_fraction: float | None, positions: str = "original") -> str:
    """The one label of a site's reduction, which is also its spec (:mod:`prismatic_tr.vla.spec`):
    ``diverse:0.25``, ``spatial_pool:2x2``, ``vision:diverse:0.1@0.25``, ``llm:attention:0.5@0.25``, with a
    ``:compact`` suffix when the kept tokens are renumbered."""
    if site == "projector":
        name = f"{method}:{spatial_merge_size}x{spatial_merge_size}" if method == POOL_METHOD \
            else f"{method}:{keep_ratio:g}"
    else:
        name = f"{site}:{method}:{keep_ratio:g}@{depth_fraction:g}"
    return name + (":compact" if positions == "compact" else "")


def family_label(site: str, method: str, depth_fraction: float | None, positions: str = "original") -> str:
    """The label without the amount kept: what a curve over keep ratios shares (``diverse``,
    ``vision:diverse@0.25``)."""
    name = method if site == "projector" else f"{site}:{method}@{depth_fraction:g}"
    return name + (":compact" if positions == "compact" else "")


@dataclass(frozen=True)
class Setting:
    """One reduction setting, the package's one type for it: what ``apply_token_reduction_to_vla`` is asked for,
    what a spec (:mod:`prismatic_tr.vla.spec`) parses to, what a checkpoint stores in ``vla.config.token_reduction``
    (:meth:`to_dict` / :meth:`from_dict`, one dict per site) and what fine-tuning attaches. Immutable, validated
    once in ``__post_init__`` (``ValueError`` naming the bad value and what is allowed).

    ``method == "none"`` is the unreduced baseline (every other field ignored, keep_ratio 1 and merge size 1).
    method: the site's method (default: :data:`DEFAULT_METHODS`'s for the projector; :meth:`for_site` takes the
        site's). keep_ratio: the fraction of visual tokens kept, in (0, 1] (``spatial_pool``: 1 / size**2).
    spatial_merge_size: ``spatial_pool``'s window side (projector site; other methods ignore it).
    depth_fraction: vision / llm sites: where, as a fraction of the depth (default 0.25); None for projector.
    positions: "original" or "compact" (module docstring); the llm site always keeps the original positions.
    scorer: method "learned" only: the trained scorer, [w_1 .. w_C, b] for a scoring tower C wide
        (:mod:`prismatic_tr.reducers.learned`); None: zeros, which pick as "diverse".
    keep_cls_token: protect prefix tokens (CLS, registers) if the backbone emits them (projector site; OpenVLA's
        backbones return patch tokens only, so this matters only for custom backbones).
    seed: of a method that draws at random. num_queries: llm site: how many of the last prompt positions score
        the visual tokens. also: further sites applied together with this one (:attr:`parts`).
    """

    method: str = DEFAULT_METHODS["projector"]
    keep_ratio: float = 0.5
    spatial_merge_size: int = DEFAULT_MERGE_SIZE
    site: str = "projector"
    depth_fraction: float | None = None
    positions: str = "original"
    scorer: tuple[float, ...] | None = None
    keep_cls_token: bool = True
    seed: int = 0
    num_queries: int = 4
    also: tuple[Setting, ...] = ()

    def __post_init__(self) -> None:
        if self.is_baseline:
            object.__setattr__(self, "keep_ratio", 1.0)
            object.__setattr__(self, "spatial_merge_size", 1)
            return
        self._check_site()
        object.__setattr__(self, "also", tuple(self.also))
        sites = [p.site for p in self.parts]
        if any(p.also or p.is_baseline for p in self.also) or len(set(sites)) != len(sites) \
                or {"projector", "vision"} <= set(sites):
            raise ValueError(f"sites {sites} cannot be combined; combine the llm site with one of projector / vision")
        merging = [p.method for p in self.parts if p.site != "llm" and merges(p.method)]
        if merging and "llm" in sites:
            raise ValueError(f"method {merging[0]!r} weighs its merged tokens in the language model's attention "
                             "(proportional attention) and cannot be combined with the llm site, which drops some of "
                             "them there; use a selecting method with the llm site")

    def _check_site(self) -> None:
        if self.site not in SITES:
            raise ValueError(f"site={self.site!r} is not allowed; use one of {SITES}")
        allowed = POSITIONS if self.site != "llm" else POSITIONS[:1]
        if self.positions not in allowed:
            raise ValueError(f"positions={self.positions!r} is not allowed at site {self.site!r}; use one of {allowed}")
        if not isinstance(self.keep_cls_token, bool):
            raise ValueError(f"keep_cls_token={self.keep_cls_token!r} is not allowed; use True or False")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed={self.seed!r} is not allowed; use an integer")
        if self.scorer is not None:
            if self.method != LEARNED:
                raise ValueError(f"scorer goes with method {LEARNED!r} (site 'vision'), not {self.method!r}")
            object.__setattr__(self, "scorer", tuple(check_scorer_values(self.scorer)))
        if self.site == "projector":
            if self.depth_fraction is not None:
                raise ValueError(f"depth_fraction={self.depth_fraction!r} goes with site 'vision' or 'llm', not 'projector'")
            object.__setattr__(self, "keep_ratio", self.reducer_config().keep_ratio)  # method, ratio and merge size
            return
        if self.method not in SITE_METHODS[self.site]:
            raise ValueError(f"method={self.method!r} is not allowed at site {self.site!r}; use one of "
                             f"{SITE_METHODS[self.site]}")
        object.__setattr__(self, "keep_ratio", check_fraction("keep_ratio", self.keep_ratio))
        depth = DEFAULT_DEPTH_FRACTION if self.depth_fraction is None else self.depth_fraction
        object.__setattr__(self, "depth_fraction", check_fraction(
            "depth_fraction", depth, closed_high=False, what="a fraction of the depth"))
        if isinstance(self.num_queries, bool) or not isinstance(self.num_queries, int) or self.num_queries < 1:
            raise ValueError(f"num_queries={self.num_queries!r} is not allowed; use an integer >= 1")

    @property
    def is_baseline(self) -> bool:
        return self.method == BASELINE

    @property
    def parts(self) -> tuple[Setting, ...]:
        """This site and the ones combined with it (none for the baseline)."""
        return (self, *self.also) if not self.is_baseline else ()

    def reductions(self, seed: int | None = None) -> list[Setting]:
        """One setting per site to attach (``seed``, when given, replaces each part's)."""
        return [replace(p, also=(), **({} if seed is None else {"seed": seed})) for p in self.parts]

    def reducer_config(self, num_prefix_tokens: int = 0, grid_size: tuple[int, int] | None = None) -> ReducerConfig:
        """The projector site's reducer parameters (the one place a :class:`ReducerConfig` is made from a setting)."""
        return ReducerConfig(method=self.method, keep_ratio=self.keep_ratio, spatial_merge_size=self.spatial_merge_size,
                             num_prefix_tokens=num_prefix_tokens, grid_size=grid_size, seed=self.seed)

    @property
    def label(self) -> str:
        """The spec this setting is written as (:func:`spec_label` per site, joined by ``+``), e.g.
        ``vision:diverse:0.1@0.25``; "none" for the baseline."""
        if self.is_baseline:
            return BASELINE
        return "+".join(spec_label(p.site, p.method, p.keep_ratio, p.spatial_merge_size, p.depth_fraction,
                                   p.positions) for p in self.parts)

    @property
    def family(self) -> str:
        """The label without the amounts kept: what a curve over keep ratios shares (:func:`family_label`), e.g.
        ``vision:diverse@0.25``; "none" for the baseline."""
        if self.is_baseline:
            return BASELINE
        return "+".join(family_label(p.site, p.method, p.depth_fraction, p.positions) for p in self.parts)

    def to_dict(self) -> dict[str, Any]:
        """One site's setting as ``config.token_reduction`` stores it (plain JSON: the scorer as a list)."""
        if self.also or self.is_baseline:
            raise ValueError(f"to_dict stores one site's setting; {self.label!r} is "
                             f"{'the baseline' if self.is_baseline else 'several'} (store [p.to_dict() for p in parts])")
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "also"}
        data["scorer"] = list(self.scorer) if self.scorer is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Setting:
        """One site's setting from a stored dict; ``ValueError`` naming unknown keys. The one place an older key
        is read: ``reduction_ratio`` (v0.3's name of ``keep_ratio``, in shipped checkpoints and adapters)."""
        data = {LEGACY_KEYS.get(k, k): v for k, v in data.items()}
        allowed = sorted(f.name for f in fields(cls) if f.name != "also")
        unknown = sorted(set(data) - set(allowed))
        if unknown:
            raise ValueError(f"unknown token_reduction keys {unknown}; allowed: {allowed}")
        return cls(**data)

    @classmethod
    def for_site(cls, site: str = "projector", method: str | None = None, **kwargs: Any) -> Setting:
        """The setting with the site's default method when ``method`` is None."""
        if site not in SITES:
            raise ValueError(f"site={site!r} is not allowed; use one of {SITES}")
        return cls(method=method if method is not None else DEFAULT_METHODS[site], site=site, **kwargs)


TokenReductionSettings = Setting  # the name of v0.3 and of the seed design's API


def read_settings(config: Any) -> list[Setting]:
    """Settings stored on a model config (``config.token_reduction``: a dict, a list of dicts, or nothing)."""
    data = getattr(config, CONFIG_KEY, None) if config is not None else None
    if not data:
        return []
    items = data if isinstance(data, (list, tuple)) else [data]
    out = []
    for item in items:
        if isinstance(item, Setting):
            out.append(item)
        elif isinstance(item, dict):
            out.append(Setting.from_dict(dict(item)))
        else:
            raise ValueError(f"config.{CONFIG_KEY} must hold settings dicts, got {type(item).__name__}")
    return out
