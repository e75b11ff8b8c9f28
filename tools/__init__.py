"""Tools of this checkout that are not part of the installed package: :mod:`tools.report` writes the README's and the docs' result tables and figure from ``benchmarks/results/``."""
