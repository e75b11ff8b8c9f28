"""Measuring tools shared by every benchmark: timing (``timing``), dispatched-op and host-sync counts
(``ops``), MACs (``flops``), the machine-noise rule (``noise``), profiling (``profiling``), GPU power
(``power``) and device / dtype names (``devices``). Nothing here knows a model.

Kept free of heavy imports: import the submodule you need, e.g.
``from prismatic_tr.bench.measure.timing import time_fn``.
"""
