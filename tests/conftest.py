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
