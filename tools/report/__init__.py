"""The README's and the docs pages' result tables and the README's figure, written from the committed results files
(``benchmarks/results/``): a tool of this checkout, not part of the installed package (it reads the checkout's
files). Run it as ``python -m tools.report`` (``--check`` changes nothing and exits 1 where a page differs).

Modules: :mod:`.sources` (which files, read once), :mod:`.cells` (how a number is written), one module per group of
tables (:mod:`.tabletop`, :mod:`.oft`, :mod:`.metaworld`, :mod:`.other`), :mod:`.figure` (the README's picture) and
:mod:`.pages` (which table goes in which page, and the command).
"""
