"""Benchmarking, one subpackage per job:

* :mod:`prismatic_tr.bench.measure`: the measuring tools (timing, op counts, FLOPs, noise gauges, profiling,
  GPU power, device and dtype names).
* :mod:`prismatic_tr.bench.vit`: the timm ViT speed harness (one speed test, input-size x batch-size sweeps,
  the break-even policy).
* :mod:`prismatic_tr.bench.vla`: the OpenVLA control-step benchmark (settings, the step and its phases,
  untimed measurements, reports, exact savings, compiled blocks; the settings grammar is
  :mod:`prismatic_tr.vla.spec`).

Kept free of heavy imports: import the submodules you need, e.g.
``from prismatic_tr.bench.measure.timing import time_fn``.
"""

# Control-step benchmark (owner: policy), resolved lazily so that importing the package stays light.
_LAZY_EXPORTS = {
    "benchmark_token_reduction": "prismatic_tr.bench.vla.benchmark",
    "format_table": "prismatic_tr.bench.vla.report",
    "plot_results": "prismatic_tr.bench.vla.report",
    "write_csv": "prismatic_tr.bench.vla.report",
    "write_json": "prismatic_tr.bench.vla.report",
}


def __getattr__(name: str) -> object:
    if name in _LAZY_EXPORTS:
        import importlib

        return getattr(importlib.import_module(_LAZY_EXPORTS[name]), name)
    raise AttributeError(f"module 'prismatic_tr.bench' has no attribute {name!r}")
