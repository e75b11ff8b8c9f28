"""Benchmarking: timing, FLOPs, op counts, profiling, sweeps, break-even policy, policy-step benchmark.

Kept free of heavy imports: import the submodules you need, e.g.
``from prismatic_tr.bench.timing import time_fn``.
"""

# Policy-step benchmark (owner: policy), resolved lazily so that importing the package stays light.
_LAZY_EXPORTS = {
    "benchmark_token_reduction": "prismatic_tr.bench.policy",
    "build_settings": "prismatic_tr.bench.policy_settings",
    "format_table": "prismatic_tr.bench.policy_report",
    "plot_results": "prismatic_tr.bench.policy_report",
    "write_csv": "prismatic_tr.bench.policy_report",
    "write_json": "prismatic_tr.bench.policy_report",
}


def __getattr__(name: str) -> object:
    if name in _LAZY_EXPORTS:
        import importlib

        return getattr(importlib.import_module(_LAZY_EXPORTS[name]), name)
    raise AttributeError(f"module 'prismatic_tr.bench' has no attribute {name!r}")
