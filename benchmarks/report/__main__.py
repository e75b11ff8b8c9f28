"""``python -m benchmarks.report [--check] [--root DIR]``: rewrite (or check) every result table and the README's
figure from the committed results files (:mod:`benchmarks.report.pages`)."""

from benchmarks.report.pages import main

raise SystemExit(main())
