"""Counter-based random numbers: a pure function of (key, counter), computed on the device.

Sampling and the codec's noise draw from these instead of a global generator, so a job's output
depends only on its own seed and position, never on which jobs share its batch or on call order,
and nothing syncs with the host. All arithmetic stays below 2**63 in int64 (32-bit values times
31-bit constants).
"""

from __future__ import annotations

import torch

MASK32 = 0xFFFFFFFF
_MUL_A = 0x7FEB352D
_MUL_B = 0x2C1B3C6D
_GOLDEN = 0x9E3779B1
# A draw's key at a step (model/sampling.py draw, kernels/sample.py):
# (the job's key + step * STEP_MUL) mod 2**32.
STEP_MUL = 0x632BE5AB


def hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit avalanche hash of int64 values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = (x * _MUL_A) & MASK32
    x = x ^ (x >> 15)
    x = (x * _MUL_B) & MASK32
    return x ^ (x >> 16)


def hash32_int(x: int) -> int:
    """``hash32`` of one int in [0, 2**32), in plain Python (the same value)."""
    x ^= x >> 16
    x = (x * _MUL_A) & MASK32
    x ^= x >> 15
    x = (x * _MUL_B) & MASK32
    return x ^ (x >> 16)


def mix_keys(seed: int, salt: int) -> int:
    """One int key from a job seed and a salt (a window start, a stream id), on the host: in plain
    Python, since the codec's lanes key every window it renders (a tensor per call cost about 25
    torch ops)."""
    x = hash32_int((seed & MASK32) ^ ((seed >> 32) & MASK32))
    return hash32_int((x + (salt & MASK32) * _GOLDEN) & MASK32)


def uniform(keys: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """U(0, 1) float32 of shape broadcast(keys, counters); keys and counters int64 >= 0."""
    h = hash32(keys & MASK32)
    x = hash32((h + counters * _GOLDEN) & MASK32)
    # 23 random bits + 0.5 is exact in float32, so u never rounds to 0 or 1.
    return ((x >> 9).to(torch.float32) + 0.5) * (1.0 / (1 << 23))


def normal(keys: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """N(0, 1) float32 by Box-Muller over two uniforms per counter."""
    u1 = uniform(keys, counters * 2)
    u2 = uniform(keys, counters * 2 + 1)
    return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * torch.pi * u2)


def gumbel(keys: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) float32: argmax(logits + gumbel) samples softmax(logits)."""
    return -torch.log(-torch.log(uniform(keys, counters)))
