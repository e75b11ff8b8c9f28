"""The timm ViT speed harness: one speed test as a CSV row (``speed``), input-size x batch-size sweeps of a
baseline against its token-reduced copy (``sweep``), and the break-even policy read from a calibration profile
(``breakeven``). Used by ``vla_scripts/speed_test.py``, ``sweep.py`` and ``calibrate.py``.

Kept free of heavy imports: import the submodule you need, e.g.
``from prismatic_tr.bench.vit.breakeven import should_use_token_reduction``.
"""
