"""The record of one call: the one place where the parts of a reduction keep what lives exactly as long as a call.

A reduction is several hooks in several modules (a selection in the vision towers, the backbone's hand-off, the
position keeping and the pruning in the language model) that must agree within one call and forget it after.
Everything they hand each other or remember during a call is a field of one :class:`CallRecord`; the hooks and the
handles that own them hold configuration and a way to find the record of the call in flight (:class:`Records`),
never a value of a call.

Who makes the record: a VLA's top-level call (``forward``, ``generate``, ``predict_action``, see
:mod:`prismatic_tr.vla.scope`) makes one and drops it when it returns or raises; every site of that model reads it.
A part used on its own (a timm ViT's fused towers, a plain Llama) opens a record of its own at the start of each
unit of its work (one pass of the towers, one fresh language-model call and the decode steps that continue it) and
drops it at the end or at the next start, so nothing of one unit reaches the next.

Only this module and torch are imported: every layer of the package may use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch


class TowersPass(NamedTuple):
    """What the scoring tower of a shared selection hands the other towers of the pass in flight
    (:mod:`prismatic_tr.vit.shared`). A named tuple, replaced whole (``torch.compile`` makes one where it cannot make
    a dataclass); ``bias`` fills in place.

    chosen: (B, n) patch indices the scoring tower chose, or None once the last tower has gathered.
    gate: (B, n) the learned scorer's straight-through gate with them, or None.
    owner: a merging strategy's (B, N) group (0 .. n - 1) of every patch, for the other towers, or None.
    sizes: a merging strategy's (B, n) float32 group sizes, read by the blocks after the cut in every tower of the
        pass (proportional attention); kept until the next pass replaces them.
    bias: per prefix count, the towers' (B, 1, 1, P + n) key bias made from ``sizes`` once per pass.
    """

    chosen: torch.Tensor | None
    gate: torch.Tensor | None
    owner: torch.Tensor | None
    sizes: torch.Tensor | None
    bias: dict[int, torch.Tensor]


class SizedCall(NamedTuple):
    """The language-model call in flight while a merge's sizes are set (:mod:`prismatic_tr.llm.sizes`); a named
    tuple, replaced whole.

    extent: ``(past, length)``: positions cached before it (None: unknown) and positions fed.
    mask: the first layer's attention mask of the call (or None), and ``biased`` that mask with the size columns
        added (None until the first layer made it), which every later layer handed the same mask reuses.
    """

    extent: tuple[int | None, int]
    mask: torch.Tensor | None
    biased: torch.Tensor | None


@dataclass
class CallRecord:
    """What the parts of one call hand each other and remember until it ends.

    Handed on by the ``projector`` and ``vision`` sites to the language model (:mod:`prismatic_tr.vla`):
        kept: (B, K) where each visual token the language model receives sits among ``num_original`` unreduced
            ones (int64, or float for pooled tokens); set after the backbone, read once by the call's first fresh
            language-model call (position keeping).
        num_original: N, the unreduced visual tokens per sample.
        num_visual: K, the visual tokens the projector put out (the ``llm`` site's window).
        llm_kept: (B, n) visual tokens (among K) the ``llm`` site kept in this call's prefill.
        sizes: (B, K) float how many unreduced tokens each visual token stands for, when the site merged them
            (``diverse_merge``), else None; read by every language-model call of this call (proportional
            attention, :mod:`prismatic_tr.llm.sizes`).
    Kept by the hooks during the call:
        towers: the pass of the towers in flight (:class:`TowersPass`), or None.
        images: one ``(chosen, sizes)`` per image the towers encoded in the backbone forward in flight (the
            ``vision`` site, :mod:`prismatic_tr.vla.sites.vision`): (B, n) patch indices, and a merging strategy's
            (B, n) group sizes or None.
        positions: ``(kept, num_original)`` the rotary embeddings apply from this call's fresh language-model call
            on, through its decode steps (:mod:`prismatic_tr.llm.rope`), or None (ordinary positions).
        pruning: the ``llm`` site's pruned sequence (:class:`prismatic_tr.llm.patch.PrunedSequence`), or None.
        lm_call: the language-model call in flight while ``sizes`` are set (:class:`SizedCall`), or None.
    """

    kept: torch.Tensor | None = None
    num_original: int | None = None
    num_visual: int | None = None
    llm_kept: torch.Tensor | None = None
    positions_taken: bool = False
    count_taken: bool = False
    towers: TowersPass | None = None
    images: list[tuple[torch.Tensor, torch.Tensor | None]] = field(default_factory=list)
    positions: tuple[torch.Tensor, int] | None = None
    pruning: Any = None
    sizes: torch.Tensor | None = None
    lm_call: SizedCall | None = None

    def hand_on(self, kept: torch.Tensor, num_original: int, sizes: torch.Tensor | None = None) -> None:
        """After the backbone: the visual tokens passed on sit at ``kept`` (B, K) among ``num_original`` and stand
        for ``sizes`` (B, K) unreduced ones each (None: one each)."""
        self.kept, self.num_original, self.positions_taken = kept, int(num_original), False
        self.sizes = sizes

    def take_positions(self) -> tuple[torch.Tensor, int] | None:
        """For the call's first fresh language-model call: ``(kept, num_original)``, once; later calls get None."""
        if self.kept is None or self.positions_taken:
            return None
        self.positions_taken = True
        return self.kept, int(self.num_original)

    def take_count(self) -> int | None:
        """For the call's first fresh language-model call: K, once; later calls get None."""
        if self.num_visual is None or self.count_taken:
            return None
        self.count_taken = True
        return self.num_visual


RecordSource = Callable[[], "CallRecord | None"]  # the record of the call in flight, or None outside any


class Records:
    """Where a part finds the record of the call in flight.

    ``outer()``: its caller's record (a VLA's top-level call), used whenever one is in flight. Otherwise the part
    works on its own: :meth:`begin` opens a fresh record at the start of each unit of its work, :meth:`end` drops it
    (the next :meth:`begin` would too), so one unit never reads another's values.
    """

    def __init__(self, outer: RecordSource | None = None) -> None:
        self.outer = outer
        self.own: CallRecord | None = None

    def _outer(self) -> CallRecord | None:
        return self.outer() if self.outer is not None else None

    def begin(self) -> CallRecord:
        """At the start of a unit of work: the caller's record, else a fresh one of the part's own."""
        record = self._outer()
        if record is None:
            record = self.own = CallRecord()
        return record

    def current(self) -> CallRecord | None:
        """The record of the call in flight: the caller's, else the part's own open one, else None."""
        record = self._outer()
        return record if record is not None else self.own

    def end(self) -> None:
        """At the end of a unit of work (or when the part is removed): drop the part's own record."""
        self.own = None
