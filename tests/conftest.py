"""Suite-wide test settings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[int]:
    """One intra-op thread per test module; yields the previous count (tests of real-size models restore it).

    The test models are tiny, so thread start-up dominates, and on a shared 2-core machine two OpenMP
    threads per process stall each other (a tiny forward measured 5-20x slower).
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield previous
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """(RLDS dataset root, tiny VLA checkpoint directory) of the fine-tuning tests, built once under the session's
    base temp (``helpers.rlds_fixture``); skips without tensorflow-datasets."""
    pytest.importorskip("tensorflow_datasets")
    from helpers.rlds_fixture import rlds_root, tiny_vla_dir

    base = tmp_path_factory.getbasetemp()
    return rlds_root(base), tiny_vla_dir(base)
