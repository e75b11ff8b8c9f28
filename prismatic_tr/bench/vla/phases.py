"""The timed phases of one control step, in order (see :mod:`prismatic_tr.bench.vla.step`)."""

PHASES: tuple[str, ...] = ("vision", "reducer", "projector", "prefill", "decode")
