"""Test doubles: a virtual clock for the 25 fps loop and a fake low-level transport."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from svc.client import RealtimeMessage
from svc.protocol import SAMPLES_PER_FRAME, FrameOut, FrameType, as_int16


async def settle(rounds: int = 30) -> None:
    """Lets every ready task run (several loop turns)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class VirtualClock:
    """Time moves only when the test calls :meth:`advance`; sleepers wake in deadline order."""

    def __init__(self, start: float = 1000.0) -> None:
        self.t = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self.t

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self.t:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline, next(self._seq), fut))
        await fut

    @property
    def sleeping(self) -> int:
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, seconds: float) -> None:
        target = self.t + seconds
        await settle()
        while self._sleepers and self._sleepers[0][0] <= target + 1e-9:
            deadline, _, fut = heapq.heappop(self._sleepers)
            self.t = max(self.t, deadline)
            if not fut.done():
                fut.set_result(None)
            await settle()
        self.t = target
        await settle()


class FakeTransport:
    """Stands in for SvcClient: records what the STV client sends; the test plays the server."""

    def __init__(self, ready: dict[str, Any] | None = None) -> None:
        self.ready = ready or {
            "type": "session_ready",
            "session_id": "s1",
            "config_id": "svc/human-portrait",
            "width": 4,
            "height": 2,
            "fps": 25,
        }
        self.audio: list[tuple[np.ndarray, bool]] = []
        self.control: list[str] = []
        self.connected = False
        self._listeners: list[tuple[Callable[[RealtimeMessage], None], Callable[[], None] | None]] = []

    @property
    def is_connected(self) -> bool:
        return self.connected

    async def connect(self) -> dict[str, Any]:
        self.connected = True
        self.push(self.ready)
        return self.ready

    def subscribe(self, on_message, on_close=None):  # type: ignore[no-untyped-def]
        entry = (on_message, on_close)
        self._listeners.append(entry)
        return lambda: self._listeners.remove(entry)

    async def send_audio(self, pcm16k: Any, end_of_turn: bool = False) -> None:
        if not self.connected:
            raise RuntimeError("not connected")
        self.audio.append((as_int16(pcm16k).copy(), end_of_turn))

    async def start_turn(self) -> bool:
        self.control.append("start_turn")
        return self.connected

    async def cancel(self) -> bool:
        self.control.append("cancel")
        return self.connected

    async def close(self) -> None:
        if not self.connected:
            return
        self.connected = False
        for _, on_close in list(self._listeners):
            if on_close:
                on_close()

    # ---- playing the server ----

    def push(self, message: RealtimeMessage) -> None:
        for on_message, _ in list(self._listeners):
            on_message(message)

    @property
    def sent(self) -> np.ndarray:
        """Everything sent so far, 16 kHz, concatenated."""
        parts = [a for a, _ in self.audio]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)


def make_frame(
    index: int,
    type: FrameType = "idle",
    *,
    turn_id: int | None = None,
    audio: Any = None,
    final: bool = False,
    image: bytes | None = None,
    image_format: str = "rgb",
    width: int = 4,
    height: int = 2,
) -> FrameOut:
    pcm = np.zeros(SAMPLES_PER_FRAME, dtype=np.int16)
    if audio is not None:
        a = as_int16(audio)[:SAMPLES_PER_FRAME]
        pcm[: len(a)] = a
    return FrameOut(
        type=type,
        final=final,
        index=index,
        pts_ms=index * 40,
        turn_id=turn_id,
        width=width,
        height=height,
        image_format=image_format,  # type: ignore[arg-type]
        image=image,
        audio=pcm,
    )


def speech_frames(sent: np.ndarray, start_index: int, turn_id: int, fade: int = 2) -> list[FrameOut]:
    """What the server makes of one utterance: 640 samples per speech frame (the last one padded
    with zeros), then ``fade`` silent fade-out frames, the last of them final."""
    n = max(1, -(-len(sent) // SAMPLES_PER_FRAME))
    frames = []
    for k in range(n + fade):
        speech = k < n
        frames.append(
            make_frame(
                start_index + k,
                ("speech-start" if k == 0 else "speech") if speech else "fade-out",
                turn_id=turn_id,
                audio=sent[k * SAMPLES_PER_FRAME : (k + 1) * SAMPLES_PER_FRAME] if speech else None,
                final=k == n + fade - 1,
                image=bytes(4 * 2 * 3),
            )
        )
    return frames


def ramp(ms: int, rate: int, start: int = 1000) -> np.ndarray:
    """A signal whose every sample encodes its own position (never 0), so order can be checked."""
    return (start + np.arange(ms * rate // 1000) % 20_000).astype(np.int16)
