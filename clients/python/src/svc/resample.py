"""Streaming resamplers for int16 mono PCM, time-aligned (no group delay in the output).

:func:`make_resampler` picks soxr's streaming resampler when the ``[stv]`` extra is installed,
else :class:`LinearResampler` (numpy only: linear interpolation, no anti-aliasing filter, so
downsampling aliases a little; fine for lip-sync, install ``svc-client[stv]`` for clean audio).
A resampler may hold back a few samples until more input arrives; :meth:`flush` at the end of an
utterance emits them.
"""

from __future__ import annotations

from typing import Protocol, cast

import numpy as np

from .protocol import Int16Array


class Resampler(Protocol):
    from_rate: int
    to_rate: int

    def process(self, pcm: Int16Array) -> Int16Array: ...

    def flush(self) -> Int16Array: ...


class IdentityResampler:
    def __init__(self, rate: int) -> None:
        self.from_rate = self.to_rate = rate

    def process(self, pcm: Int16Array) -> Int16Array:
        return cast(Int16Array, pcm.copy())

    def flush(self) -> Int16Array:
        return np.zeros(0, dtype=np.int16)


class LinearResampler:
    """Linear interpolation; output sample ``n`` is the input at time ``n * from_rate / to_rate``
    (exact integer positions, so long streams never drift)."""

    def __init__(self, from_rate: int, to_rate: int) -> None:
        if from_rate <= 0 or to_rate <= 0:
            raise ValueError(f"invalid sample rates {from_rate} -> {to_rate}")
        self.from_rate = from_rate
        self.to_rate = to_rate
        self._buf = np.zeros(0, dtype=np.float64)
        self._dropped = 0  # absolute input index of _buf[0]
        self._produced = 0

    def process(self, pcm: Int16Array) -> Int16Array:
        self._buf = np.concatenate([self._buf, pcm.astype(np.float64)])
        return self._emit(final=False)

    def flush(self) -> Int16Array:
        return self._emit(final=True)

    def _emit(self, final: bool) -> Int16Array:
        total = self._dropped + len(self._buf)
        f, t = self.from_rate, self.to_rate
        # Output n needs input floor(n*f/t) and the one after it (the future is silence when final).
        limit = total if final else total - 1
        end = max(self._produced, -(-limit * t // f))  # n with n*f/t < limit
        n = np.arange(self._produced, end, dtype=np.int64)
        pos = n * f
        base = pos // t
        frac = (pos % t) / t
        padded = np.concatenate([self._buf, [0.0]])
        i = base - self._dropped
        a = padded[i]
        b = padded[np.minimum(i + 1, len(padded) - 1)]
        out = a + (b - a) * frac
        self._produced = int(end)
        keep_from = min(len(self._buf), max(0, (self._produced * f) // t - self._dropped))
        if keep_from:
            self._buf = self._buf[keep_from:]
            self._dropped += keep_from
        return cast(Int16Array, np.clip(np.floor(out + 0.5), -32768, 32767).astype(np.int16))


class SoxrResampler:
    """soxr's streaming resampler (``[stv]`` extra): band-limited, state kept across chunks."""

    def __init__(self, from_rate: int, to_rate: int, quality: str = "HQ") -> None:
        import soxr

        self.from_rate = from_rate
        self.to_rate = to_rate
        self._stream = soxr.ResampleStream(from_rate, to_rate, 1, dtype="int16", quality=quality)

    def process(self, pcm: Int16Array) -> Int16Array:
        if not len(pcm):
            return np.zeros(0, dtype=np.int16)
        return np.asarray(self._stream.resample_chunk(np.ascontiguousarray(pcm, dtype=np.int16)), dtype=np.int16)

    def flush(self) -> Int16Array:
        return np.asarray(self._stream.resample_chunk(np.zeros(0, dtype=np.int16), last=True), dtype=np.int16)


def have_soxr() -> bool:
    try:
        import soxr  # noqa: F401
    except ImportError:
        return False
    return True


def make_resampler(from_rate: int, to_rate: int) -> Resampler:
    if from_rate == to_rate:
        return IdentityResampler(from_rate)
    if have_soxr():
        return SoxrResampler(from_rate, to_rate)
    return LinearResampler(from_rate, to_rate)
