"""The reduction settings a user picks for a VLA, and their round trip through ``vla.config``.

Three sites, each with its own validated settings (fractions of tokens and of depth, so one setting applies to
models of any size; a depth fraction rounds to a whole block or layer, so on shallow towers it cuts later than on
deep ones: ``vision`` at 0.25 cuts after 2 of the bundled policy's 5 tower blocks but after 6 of DINOv2-L's 23;
``prismatic_tr.vla.reduction_cut`` says where):

* ``projector``: between the vision backbone and the projector (``method`` one of the reducers, ``reduction_ratio``
  kept, ``spatial_merge_size`` for ``spatial_pool``);
* ``vision``: inside the vision towers after ``depth_fraction`` of each tower's blocks, one selection shared by the
  towers (``method`` "attention", "norm", any selecting reducer, e.g. "diverse", or "learned", the diverse cover
  weighed by a scorer trained with the policy, whose weights ``scorer`` holds; ``reduction_ratio`` kept);
* ``llm``: inside the language model before layer ``round(depth_fraction * layers)`` of the prefill (``method``
  "attention": what the last ``num_queries`` prompt positions attend to; ``reduction_ratio`` kept).

``projector`` and ``vision`` both shrink what the backbone hands the projector and share one slot; ``llm``
combines with either. ``vla.config.token_reduction`` holds one settings dict, or a list when several sites are on.

``positions``: the sequence positions (RoPE ids) the kept visual tokens get in the language model.
``"original"`` (default, every site): the position each token has without reduction (BOS 0, patch ``i`` of image
``m`` at ``1 + m * P + i``, every text and generated token where it is without reduction; see
:mod:`prismatic_tr.llm.positions`). ``"compact"`` (``projector`` and ``vision`` only): the kept tokens numbered
``1 .. K`` and the text moved forward by ``N - K``, as v0.2 did; kept for comparison.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from prismatic_tr.reducers import ReducerConfig
from prismatic_tr.reducers.config import check_fraction
from prismatic_tr.reducers.learned import LEARNED, check_scorer_values
from prismatic_tr.vit.shared import scorings

CONFIG_KEY = "token_reduction"
SITES = ("projector", "vision", "llm")
POSITIONS = ("original", "compact")
SITE_METHODS: dict[str, tuple[str, ...]] = {"vision": scorings(), "llm": ("attention",)}
# Measured on the bundled policy's validation split (benchmarks/results/selection/): the max-min cover keeps the
# small objects the task names, where the seed design's topk_magnitude / attention_score keep the background.
DEFAULT_METHODS = {"projector": "diverse", "vision": "diverse", "llm": "attention"}
DEFAULT_DEPTH_FRACTION = 0.25
POOL_METHOD = "spatial_pool"


def spec_label(site: str, method: str, reduction_ratio: float, spatial_merge_size: int,
               depth_fraction: float | None, positions: str = "original") -> str:
    """The one label of a site's reduction, which is also its spec (:mod:`prismatic_tr.vla.spec`):
    ``diverse:0.25``, ``spatial_pool:2x2``, ``vision:diverse:0.1@0.25``, ``llm:attention:0.5@0.25``, with a
    ``:compact`` suffix when the kept tokens are renumbered."""
    if site == "projector":
        name = f"{method}:{spatial_merge_size}x{spatial_merge_size}" if method == POOL_METHOD \
            else f"{method}:{reduction_ratio:g}"
    else:
        name = f"{site}:{method}:{reduction_ratio:g}@{depth_fraction:g}"
    return name + (":compact" if positions == "compact" else "")


def family_label(site: str, method: str, depth_fraction: float | None, positions: str = "original") -> str:
    """The label without the amount kept: what a curve over keep ratios shares (``diverse``,
    ``vision:diverse@0.25``)."""
    name = method if site == "projector" else f"{site}:{method}@{depth_fraction:g}"
    return name + (":compact" if positions == "compact" else "")


@dataclass
class TokenReductionSettings:
    """What ``apply_token_reduction_to_vla`` was asked for; stored in ``vla.config.token_reduction``.

    keep_cls_token: protect prefix tokens (CLS, registers) if the backbone emits them (projector site; OpenVLA's
        backbones return patch tokens only, so this matters only for custom backbones).
    depth_fraction: vision / llm sites: where, as a fraction of the depth (default 0.25); None for projector.
    num_queries: llm site: how many of the last prompt positions score the visual tokens.
    positions: "original" or "compact" (module docstring); the llm site always keeps the original positions.
    scorer: method "learned" only: the trained scorer, [w_1 .. w_C, b] for a scoring tower C wide
        (:mod:`prismatic_tr.reducers.learned`); None: zeros, which pick as "diverse".
    """

    method: str = DEFAULT_METHODS["projector"]
    reduction_ratio: float = 0.5
    spatial_merge_size: int = 2
    keep_cls_token: bool = True
    seed: int = 0
    site: str = "projector"
    depth_fraction: float | None = None
    num_queries: int = 4
    positions: str = "original"
    scorer: list[float] | None = None

    def __post_init__(self) -> None:
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
            self.scorer = check_scorer_values(self.scorer)
        if self.site == "projector":
            if self.depth_fraction is not None:
                raise ValueError(f"depth_fraction={self.depth_fraction!r} goes with site 'vision' or 'llm', not 'projector'")
            self.reducer_config()  # validates method, ratio and merge size now, not mid-forward
            return
        if self.method not in SITE_METHODS[self.site]:
            raise ValueError(f"method={self.method!r} is not allowed at site {self.site!r}; use one of "
                             f"{SITE_METHODS[self.site]}")
        check_fraction("reduction_ratio", self.reduction_ratio)
        if self.depth_fraction is None:
            self.depth_fraction = DEFAULT_DEPTH_FRACTION
        check_fraction("depth_fraction", self.depth_fraction, closed_high=False, what="a fraction of the depth")
        if isinstance(self.num_queries, bool) or not isinstance(self.num_queries, int) or self.num_queries < 1:
            raise ValueError(f"num_queries={self.num_queries!r} is not allowed; use an integer >= 1")

    def reducer_config(
        self, num_prefix_tokens: int = 0, grid_size: tuple[int, int] | None = None
    ) -> ReducerConfig:
        return ReducerConfig(
            method=self.method,
            reduction_ratio=self.reduction_ratio,
            spatial_merge_size=self.spatial_merge_size,
            num_prefix_tokens=num_prefix_tokens,
            grid_size=grid_size,
            seed=self.seed,
        )

    @property
    def label(self) -> str:
        """This setting as its spec (:func:`spec_label`), e.g. ``vision:diverse:0.1@0.25``."""
        return spec_label(self.site, self.method, self.reduction_ratio, self.spatial_merge_size, self.depth_fraction,
                          self.positions)

    @property
    def family(self) -> str:
        """The label without the amount kept (:func:`family_label`), e.g. ``vision:diverse@0.25``."""
        return family_label(self.site, self.method, self.depth_fraction, self.positions)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenReductionSettings:
        """Settings from a stored dict; ``ValueError`` naming unknown keys."""
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown token_reduction keys {unknown}; allowed: {sorted(cls.__dataclass_fields__)}")
        return cls(**data)

    @classmethod
    def for_site(cls, site: str = "projector", method: str | None = None, **kwargs: Any) -> TokenReductionSettings:
        """Settings with the site's default method when ``method`` is None."""
        if site not in SITES:
            raise ValueError(f"site={site!r} is not allowed; use one of {SITES}")
        return cls(method=method if method is not None else DEFAULT_METHODS[site], site=site, **kwargs)


def read_settings(config: Any) -> list[TokenReductionSettings]:
    """Settings stored on a model config (``config.token_reduction``: a dict, a list of dicts, or nothing)."""
    data = getattr(config, CONFIG_KEY, None) if config is not None else None
    if not data:
        return []
    items = data if isinstance(data, (list, tuple)) else [data]
    out = []
    for item in items:
        if isinstance(item, TokenReductionSettings):
            out.append(item)
        elif isinstance(item, dict):
            out.append(TokenReductionSettings.from_dict(dict(item)))
        else:
            raise ValueError(f"config.{CONFIG_KEY} must hold settings dicts, got {type(item).__name__}")
    return out
