"""The timed phases of one control step, in order, for each kind of model the benchmark times.

OpenVLA (:mod:`prismatic_tr.bench.vla.step`): vision, reducer, projector, prefill (the language model over the
prompt, filling a cache), decode (the remaining action tokens one by one). OpenVLA-OFT
(:mod:`prismatic_tr.bench.vla.oft_step`): vision, reducer, projector (and the proprio token), llm (the one
parallel pass over prompt and action slots), head (the actions read from the slots' hidden states).
"""

from __future__ import annotations

from dataclasses import dataclass

PHASES: tuple[str, ...] = ("vision", "reducer", "projector", "prefill", "decode")
OFT_PHASES: tuple[str, ...] = ("vision", "reducer", "projector", "llm", "head")
ALL_PHASES: tuple[str, ...] = tuple(dict.fromkeys(PHASES + OFT_PHASES))  # every phase any record may hold


@dataclass(frozen=True)
class StepPhases:
    """What the Amdahl bound needs to know about a step's phases.

    names: the phases in order; sequence: the language-model phase whose cost grows with the sequence (its
    speedup fields are ``{sequence}_speedup`` / ``_ideal_speedup`` / ``_efficiency``); unchanged: the phases a cut
    before the language model leaves as they are (vision is timed unreduced, the decode / head work is fixed).
    """

    names: tuple[str, ...]
    sequence: str
    unchanged: tuple[str, ...]


OPENVLA_STEP = StepPhases(PHASES, "prefill", ("vision", "decode"))
OFT_STEP = StepPhases(OFT_PHASES, "llm", ("vision", "head"))
STEP_KINDS: dict[str, StepPhases] = {"openvla": OPENVLA_STEP, "openvla-oft": OFT_STEP}


def step_phases(record: dict) -> StepPhases:
    """The phases of the step a record timed (``model_kind``; records written before OFT are OpenVLA's)."""
    return STEP_KINDS[record.get("model_kind", "openvla")]
