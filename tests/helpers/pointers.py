"""The repository paths a page (a README, a docs page) points to."""

from __future__ import annotations

import re

SUFFIXES = (".json", ".csv", ".png", ".py", ".sh", ".txt", ".md", ".log", ".yaml", ".safetensors")
NOT_COMMITTED = ("outputs/", "runs/", "/tmp/", ".venv")  # run outputs and virtual environments, never committed


def pointers(text: str) -> list[str]:
    """Paths in a README: words inside `code spans` and the targets of [links](...) that look like a file (a
    known suffix) or a folder (a slash); placeholders (``<dir>``), options and assignments are left out."""
    spans = re.findall(r"`([^`]+)`", text) + re.findall(r"\]\(([^)#\s]+)[^)]*\)", text)
    found = []
    for span in spans:
        for word in span.split():
            word = word.strip("\"',;()")
            word = re.split(r"::|:(?=[A-Za-z_])", word)[0]  # tests/x.py::test_name, file.py:function
            if (not word or word.startswith(("-", "http", "$", "~")) or any(c in word for c in "<>=[]{}@+|")
                    or "..." in word
                    or word.startswith(NOT_COMMITTED)):
                continue
            if "/" in word or word.endswith(SUFFIXES):
                found.append(word)
    return sorted(set(found))
