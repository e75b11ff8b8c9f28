"""``python -m tools.report [--check] [--root DIR]``: rewrite (or check) every result table and the README's
figure from the committed results files (:mod:`tools.report.pages`)."""

from tools.report.pages import main

raise SystemExit(main())
