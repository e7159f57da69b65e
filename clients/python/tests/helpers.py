"""Test helpers: a virtual clock for the 25 fps loop, and an in-process WebSocket server that plays
the /realtime server for the real SvcClient (the test decides every frame it sends)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
from typing import Any

import numpy as np
from websockets.asyncio.server import Server, ServerConnection, serve

from svc.client import RealtimeMessage
from svc.protocol import SAMPLES_PER_FRAME, FrameOut, FrameType, as_int16, decode_audio_in, encode_frame_out


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


class PlayedServer:
    """An in-process WebSocket server on loopback speaking the /realtime protocol, driven by the
    test: :meth:`push` queues a message (sent in order), everything the client sends is recorded
    (``audio``: 16 kHz PCM and end-of-turn flags; ``control``: message types, pings aside).
    :meth:`sync` is a barrier over the socket: once it returns, the server has received everything
    the client sent before it, and the client has received everything pushed before it."""

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
        #: Every message received, in order: ``"audio"`` or the control message's type (pings aside).
        self.order: list[str] = []
        self.url = ""
        self._server: Server | None = None
        self._ws: ServerConnection | None = None
        self._outbox: asyncio.Queue[RealtimeMessage | None] = asyncio.Queue()
        self._barriers: dict[int, asyncio.Future[None]] = {}
        self._tokens = itertools.count(1)

    async def start(self) -> PlayedServer:
        self._server = await serve(self._handle, "127.0.0.1", 0, compression=None)
        self.url = f"ws://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/realtime"
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _handle(self, ws: ServerConnection) -> None:
        self._ws = ws
        await ws.send(json.dumps(self.ready))
        sender = asyncio.create_task(self._send_all(ws))
        try:
            async for data in ws:
                if isinstance(data, bytes):
                    a = decode_audio_in(data)
                    self.audio.append((a.pcm.copy(), a.end_of_turn))
                    self.order.append("audio")
                    continue
                message = json.loads(data)
                if message["type"] == "ping":
                    self._outbox.put_nowait({"type": "pong", "t": message.get("t")})
                else:
                    self.control.append(message["type"])
                    self.order.append(message["type"])
        except Exception:
            pass
        finally:
            sender.cancel()

    async def _send_all(self, ws: ServerConnection) -> None:
        while True:
            message = await self._outbox.get()
            if message is None:
                await ws.close(1000, "bye")
                return
            await ws.send(encode_frame_out(message) if isinstance(message, FrameOut) else json.dumps(message))

    def push(self, message: RealtimeMessage) -> None:
        self._outbox.put_nowait(message)

    def watch(self, message: RealtimeMessage) -> None:
        """The client's side of :meth:`sync` (a subscriber of the client's messages)."""
        if isinstance(message, dict) and message.get("type") == "pong":
            waiter = self._barriers.pop(int(message["t"]), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def sync(self, client: Any) -> None:
        token = next(self._tokens)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._barriers[token] = waiter
        if not await client.ping(token):
            raise AssertionError("sync: the connection is closed")
        await asyncio.wait_for(waiter, 5)  # a bound that only catches a hang

    async def close(self) -> None:
        """The server closes the socket (1000) after what was pushed."""
        self._outbox.put_nowait(None)

    @property
    def sent(self) -> np.ndarray:
        """Everything received so far, 16 kHz, concatenated."""
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
