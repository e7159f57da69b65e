"""PCM helpers of :class:`svc.SvcSTVClient`: mono from a channel layout (as the TypeScript client's
``toMono``), and joining a held tail to the next chunk."""

from __future__ import annotations

from typing import cast

import numpy as np

from .protocol import Int16Array

EMPTY: Int16Array = np.zeros(0, dtype=np.int16)


def join(a: Int16Array, b: Int16Array) -> Int16Array:
    return b if not len(a) else cast(Int16Array, np.concatenate([a, b]))


def to_mono(pcm: Int16Array, channels: int) -> Int16Array:
    """Mono from interleaved 1-D samples or a ``(frames, channels)`` array: channels are averaged
    (rounded like the TypeScript client). A layout that does not match ``channels`` raises ValueError."""
    if isinstance(channels, bool) or not isinstance(channels, (int, np.integer)) or channels < 1:
        raise ValueError(f"num_channels must be an integer of at least 1, got {channels!r}")
    if pcm.ndim == 2:
        if pcm.shape[1] != channels:
            raise ValueError(
                f"pcm has shape {pcm.shape} ({pcm.shape[1]} channels) but num_channels={channels}: "
                f"pass num_channels={pcm.shape[1]} (channels are averaged to mono)"
            )
        frames = pcm
    elif pcm.ndim <= 1:
        flat = pcm.reshape(-1)
        if channels == 1:
            return flat
        if len(flat) % channels:
            raise ValueError(
                f"{len(flat)} interleaved samples are not whole frames of {channels} channels"
            )
        frames = flat.reshape(-1, channels)
    else:
        raise ValueError(f"pcm must be 1-D (interleaved) or (frames, channels), got shape {pcm.shape}")
    if channels == 1:
        return frames.reshape(-1)
    total = frames.astype(np.int32).sum(axis=1)
    return cast(Int16Array, np.floor(total / channels + 0.5).astype(np.int16))
