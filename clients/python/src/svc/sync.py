"""Which slice of the original TTS audio plays with each avatar frame (SvcSTVClient's A/V sync).

A port of ``transports/realtime/turn-audio.ts``. The client keeps, per utterance, both the 16 kHz
copy it sent and the original-rate audio. A speech frame from the server carries the 640 samples
(16 kHz) its image was animated with: a full 40 ms window, a partial one padded with zeros (end of
the audio), or only zeros (the server's copy ran dry mid-utterance: streaming TTS slower than real
time). Matching those samples against what was sent tells exactly how much input the frame
consumed, so the original-rate audio stays aligned with the picture across underruns and utterance
boundaries (never "40 ms per frame, whatever happened").
"""

from __future__ import annotations

import numpy as np

from .protocol import SAMPLE_RATE, SAMPLES_PER_FRAME, Int16Array

#: How far (16 kHz samples) to look around the expected position when a frame does not match it.
RESYNC_WINDOW = 2 * SAMPLES_PER_FRAME


def _js_round(x_num: int, den: int) -> int:
    """floor(x_num / den + 0.5), as JavaScript's Math.round for non-negative values."""
    return (2 * x_num + den) // (2 * den)


class SampleLog:
    def __init__(self) -> None:
        self._parts: list[Int16Array] = []
        self._flat: Int16Array | None = None
        self.length = 0

    def push(self, pcm: Int16Array) -> None:
        if not len(pcm):
            return
        self._parts.append(pcm)
        self.length += len(pcm)
        self._flat = None

    @property
    def all(self) -> Int16Array:
        if self._flat is None:
            self._flat = (
                np.concatenate(self._parts) if len(self._parts) != 1 else self._parts[0]
            ) if self._parts else np.zeros(0, dtype=np.int16)
            self._parts = [self._flat] if len(self._flat) else []
        return self._flat


class LocalTurn:
    """One utterance as the client sent it."""

    def __init__(self) -> None:
        self.sent = SampleLog()
        self.original = SampleLog()
        #: The server's id for this utterance, learnt from its first speech frame.
        self.server_turn_id: int | None = None
        self.ended = False
        #: Position (16 kHz samples) of the next frame's audio in ``sent``.
        self._cursor = 0

    @property
    def has_audio(self) -> bool:
        return self.sent.length > 0

    def audio_for(self, received: Int16Array, output_rate: int, samples_out: int) -> Int16Array:
        """The original-rate audio that belongs with a speech frame carrying ``received`` (16 kHz)."""
        sent = self.sent.all
        at = self._cursor
        consumed = consumed_at(sent, at, received)
        if consumed is None:
            # Lost track (should not happen): find the frame's audio near where it was expected.
            found = locate(sent, at, received)
            if found:
                at, consumed = found
            else:
                consumed = min(SAMPLES_PER_FRAME, max(0, len(sent) - at))
        self._cursor = at + consumed
        start = _js_round(at * output_rate, SAMPLE_RATE)
        stop = start if consumed == 0 else _js_round((at + consumed) * output_rate, SAMPLE_RATE)
        out = np.zeros(samples_out, dtype=np.int16)
        piece = self.original.all[start : min(stop, start + samples_out)]
        out[: len(piece)] = piece
        return out


def consumed_at(sent: Int16Array, at: int, received: Int16Array) -> int | None:
    """Input samples a frame consumed if it was animated from ``sent`` at ``at``; None if it was not."""
    n = min(len(received), max(0, len(sent) - at))
    same = received[:n] == sent[at : at + n]
    k = n if bool(same.all()) else int(np.argmin(same))
    if np.any(received[k:] != 0):
        return None
    return k


def locate(sent: Int16Array, around: int, received: Int16Array) -> tuple[int, int] | None:
    best: tuple[int, int] | None = None
    for at in range(max(0, around - RESYNC_WINDOW), min(len(sent) - 1, around + RESYNC_WINDOW) + 1):
        k = consumed_at(sent, at, received)
        if k is not None and k > 0 and (best is None or k > best[1]):
            best = (at, k)
    return best
