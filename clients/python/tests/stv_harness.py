"""The harness of the SvcSTVClient tests on a virtual clock (test_stv_virtual_clock.py,
test_stv_playout.py, test_fallbacks.py): SvcSTVClient over the real SvcClient, with the test
playing the server through an in-process WebSocket server (PlayedServer).

Every output is stamped with the virtual time it came out at, so the 25 fps cadence, the jitter
buffer, underruns and the barge-in re-sync are checked exactly, without real-time sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from svc import STVAudioFrame, STVEvent, STVVideoFrame, SvcSTVClient

from .helpers import PlayedServer, VirtualClock, make_frame, speech_frames

RGB = bytes(range(24))  # 4 x 2 x 3


class Harness:
    def __init__(self, **options: Any) -> None:
        self.clock = VirtualClock()
        self.fake = PlayedServer()
        self.handler_errors: list[tuple[STVEvent, str]] = []
        self.options = options
        options.setdefault("decoder", None)
        self.out: list[tuple[float, Any]] = []
        self.events: list[tuple[STVEvent, dict[str, Any]]] = []
        self.index = 0

    async def start(self, pump: bool = True) -> Harness:
        await self.fake.start()
        self.client = SvcSTVClient(
            "k",
            "c",
            url=self.fake.url,
            keep_alive_interval=0,
            clock=self.clock,
            on_handler_error=lambda e, err: self.handler_errors.append((e, str(err))),
            **self.options,
        )
        self.client.client.subscribe(self.fake.watch)  # type: ignore[attr-defined]
        for e in STVEvent:
            self.client.add_listener(e, lambda p, e=e: self.events.append((e, p)))
        await self.client.connect()
        await self.sync()
        self.t0 = self.clock.now()
        if pump:
            self.pump = asyncio.create_task(self._pump())
        return self

    async def _pump(self) -> None:
        async for o in self.client.output_stream():
            self.out.append((self.clock.now(), o))

    def push_idle(self, n: int, image: bytes | None = RGB) -> None:
        for _ in range(n):
            self.fake.push(make_frame(self.index, "idle", image=image))
            self.index += 1

    def push_speech(self, sent: np.ndarray, turn_id: int, count: int | None = None, skip: int = 0) -> int:
        frames = speech_frames(sent, self.index - skip, turn_id)[skip:]
        frames = frames if count is None else frames[:count]
        for f in frames:
            self.fake.push(f)
        self.index += len(frames)
        return len(frames)

    async def sync(self) -> None:
        """Everything the client sent has reached the server, everything pushed has reached the client."""
        await self.fake.sync(self.client.client)

    async def ticks(self, n: int) -> None:
        if self.client.is_connected:
            await self.sync()
        for _ in range(n):
            await self.clock.advance(0.04)

    @property
    def audio(self) -> list[STVAudioFrame]:
        return [o for _, o in self.out if isinstance(o, STVAudioFrame)]

    @property
    def video(self) -> list[STVVideoFrame]:
        return [o for _, o in self.out if isinstance(o, STVVideoFrame)]

    def names(self) -> list[str]:
        return [e.value for e, _ in self.events]

    def payload(self, event: STVEvent) -> dict[str, Any]:
        return next(p for e, p in self.events if e == event)

    async def close(self) -> None:
        await self.client.close()
        await self.pump
        await self.fake.stop()


def voiced(audio: list[STVAudioFrame]) -> np.ndarray:
    pcm = np.concatenate([a.pcm for a in audio]) if audio else np.zeros(0, dtype=np.int16)
    return pcm[pcm != 0]
