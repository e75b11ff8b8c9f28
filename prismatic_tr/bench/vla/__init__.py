"""The OpenVLA control-step benchmark behind ``vla_scripts/benchmark.py``: the settings and their specs
(``specs``), one control step split into timed phases (``step``), the benchmark loop (``benchmark``), its
untimed measurements (``measure``: MACs, memory, fidelity), tables / CSV / JSON / figure (``report``), what
the exact savings save (``exact``) and ``--compile`` (``compiled``).

Kept free of heavy imports: import the submodule you need, e.g.
``from prismatic_tr.bench.vla.benchmark import benchmark_token_reduction``; the most used names are also
lazy attributes of :mod:`prismatic_tr.bench`.
"""
