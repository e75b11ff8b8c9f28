"""Seeded random draws that ``torch.compile(fullgraph=True)`` can trace: a counter and an integer hash.

A ``torch.Generator`` cannot be traced ("an opaque object was created in the middle of the program"), so the
``random`` strategy does not use one. Instead :class:`KeyStream` keeps a 0-d int64 state on the host, advances
it in place once per call (a Weyl sequence, so every call gets a fresh key) and hashes it into a key;
:func:`uniform_scores` hashes (key, position) into one distinct integer score per token. Top-K of those
scores is a uniform random K-subset. Everything is tensor arithmetic with static shapes: no host sync, no
graph break, the same bits in eager and compiled code.

Why the state lives on the host: a 0-d CPU tensor combines with tensors on any device as a scalar kernel
argument (no copy, no sync), and it exists before any traced call, so no tensor is created inside a
compiled region (torch 2.2 mis-handles a tensor created and stored on the module during tracing).
Under a captured CUDA graph the key would be frozen at capture time (every replay would repeat the draw), so
:class:`~prismatic_tr.vla.cuda_graph.CapturedStep` refuses a setting that draws at random.
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
# Odd multipliers below 2**31, so that a 32-bit value times one fits in int64 without overflow:
# 0x7FEB352D is the first multiplier of Chris Wellons' "lowbias32" hash (hash-prospector, public domain),
# 0x5BD1E995 the multiplier of Austin Appleby's MurmurHash2 (public domain). Uniformity of the resulting
# subsets is tested in tests/reducers/test_reducers.py.
_MUL1, _MUL2 = 0x7FEB352D, 0x5BD1E995
_WEYL_STEP = 0x9E3779B9  # odd: the state visits all 2**32 values before repeating


def mix32(x: torch.Tensor) -> torch.Tensor:
    """Bijective hash of int64 values in [0, 2**32) onto [0, 2**32) (xorshift-multiply rounds)."""
    x = x ^ (x >> 16)
    x = (x * _MUL1) & MASK32
    x = x ^ (x >> 15)
    x = (x * _MUL2) & MASK32
    return x ^ (x >> 16)


def uniform_scores(batch: int, num_tokens: int, key: torch.Tensor, device: torch.device) -> torch.Tensor:
    """(batch, num_tokens) int64 scores, all distinct, a fresh pseudo-random order for each ``key``.

    ``key``: 0-d int64 tensor in [0, 2**32) (any device; a CPU one acts as a scalar). Each row hashes its
    own block of positions, so rows draw independent subsets.
    """
    positions = torch.arange(batch * num_tokens, device=device).view(batch, num_tokens)
    return mix32(positions ^ key)


class KeyStream:
    """A seeded sequence of hash keys: ``next_key()`` advances an int64 state in place and returns its hash.

    The state is a 0-d CPU tensor created here (never inside a traced call); ``reseed`` rewrites it in
    place, so a compiled caller sees the same tensor object and does not recompile.
    """

    def __init__(self, seed: int = 0) -> None:
        with torch.inference_mode(False):  # a normal tensor even when built under inference_mode
            self.state = torch.zeros((), dtype=torch.int64)
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        """Restart the sequence from ``seed`` (any int; equal seeds give equal sequences)."""
        with torch.no_grad():
            self.state.copy_(mix32(torch.tensor(int(seed) & MASK32, dtype=torch.int64)))

    def next_key(self) -> torch.Tensor:
        """The key of the next draw (0-d int64 CPU tensor); advances the state."""
        self.state.add_(_WEYL_STEP).bitwise_and_(MASK32)
        return mix32(self.state)
