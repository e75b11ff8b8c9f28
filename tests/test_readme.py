"""The README's quick start runs as written (it must stay self-contained: no checkpoint, no files)."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def quick_start() -> str:
    text = README.read_text()
    section = text[text.index("## Quick start"):]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("```\n", start)]


def test_quick_start_runs_and_undoes_the_reduction() -> None:
    code = quick_start()
    assert "apply_token_reduction_to_vla" in code and "remove_token_reduction" in code
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)  # the code asserts the restored model's action itself
    assert namespace["action"].shape == (7,)
