"""The playout of :class:`svc.SvcSTVClient`: the jitter buffer of frames received from the server,
the 25 fps clock that plays them out, and the bounded queue of played ticks that
``output_stream()`` reads.

Policy only: which frames wait, which are dropped to catch up with real time, and when each one
plays. What a frame plays as (its audio, its picture, the events it starts) is the client's: the
clock hands each frame to the client's tick function, which queues the result with :meth:`Playout.put`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from .clock import Clock
from .protocol import FRAME_MS, FrameOut, Int16Array
from .stv_frames import STVOutput

#: Frames buffered before playback starts (and after an underrun): 2 = 80 ms.
DEFAULT_JITTER_BUFFER_FRAMES = 2
#: Above this many buffered frames, idle frames are dropped to catch up with real time.
DEFAULT_MAX_BUFFERED_FRAMES = 25
#: While playing, an idle frame that arrives with this many frames beyond the jitter buffer
#: already queued is dropped: after a stall, the latency it added drains back one frame per
#: tick during the next silence (speech frames are never dropped). 2 frames absorb ordinary
#: network unevenness without dropping anything.
DEFAULT_DRAIN_SLACK_FRAMES = 2
#: Ticks of output (one audio frame and, with a picture, one video frame each) a consumer of
#: :meth:`SvcSTVClient.output_stream` may leave unread: 50 = 2 s. Past it the oldest tick is
#: dropped (counted in ``output_dropped``), so a consumer slower than real time, or one that
#: stopped reading, falls at most this far behind instead of holding every frame (a 640x360
#: picture is 691 KB: 17 MB a second).
DEFAULT_MAX_OUTPUT_FRAMES = 50


@dataclass
class _Buffered:
    frame: FrameOut
    rgb: asyncio.Future[bytes | None] | None
    #: Original-rate audio of this frame (silence unless it is speech).
    pcm: Int16Array
    #: The rate of ``pcm`` (the output rate is only known once the first TTS audio came).
    rate: int


class Playout:
    """The jitter buffer, the 25 fps clock over it and the queue of played ticks (one consumer)."""

    def __init__(
        self,
        clock: Clock,
        *,
        jitter_buffer_frames: int = DEFAULT_JITTER_BUFFER_FRAMES,
        max_buffered_frames: int = DEFAULT_MAX_BUFFERED_FRAMES,
        drain_slack_frames: int = DEFAULT_DRAIN_SLACK_FRAMES,
        max_output_frames: int = DEFAULT_MAX_OUTPUT_FRAMES,
    ) -> None:
        self._clock = clock
        self._jitter = max(1, jitter_buffer_frames)
        self._max_buffered = max_buffered_frames
        if drain_slack_frames < 0:
            raise ValueError(f"drain_slack_frames must be >= 0, got {drain_slack_frames}")
        self._drain_slack = drain_slack_frames
        if max_output_frames < 1:
            raise ValueError(f"max_output_frames must be >= 1, got {max_output_frames}")
        #: One entry per tick (its audio frame, then its video frame when it has a picture); the
        #: oldest is dropped past ``max_output_frames``.
        self._output: deque[tuple[STVOutput, ...]] = deque()
        self._max_output = max_output_frames
        self._output_ready = asyncio.Event()
        #: Ticks of output dropped because the consumer left more than ``max_output_frames`` unread.
        self.output_dropped = 0
        self._buffer: deque[_Buffered] = deque()
        self._playing = False
        self._start_playback = asyncio.Event()
        self._closed = False
        #: Ticks where no frame had arrived in time (diagnostics).
        self.underruns = 0
        #: Frames dropped to catch up with real time (diagnostics).
        self.dropped = 0

    @property
    def buffered_frames(self) -> int:
        """Frames received and not yet played: the playback latency, in 40 ms frames."""
        return len(self._buffer)

    @property
    def output_queued_frames(self) -> int:
        """Ticks of output waiting for the consumer of :meth:`stream` (at most ``max_output_frames``)."""
        return len(self._output)

    # ---- the jitter buffer ----------------------------------------------------------------------

    def skips(self, frame: FrameOut) -> bool:
        """Whether an arriving frame is dropped at once (counted in ``dropped``): an idle frame while
        playing with jitter buffer + drain slack frames already queued."""
        if frame.type == "idle" and self._playing and len(self._buffer) >= self._jitter + self._drain_slack:
            # Behind since a stall: skipping silence brings the latency back (DEFAULT_DRAIN_SLACK_FRAMES).
            self.dropped += 1
            return True
        return False

    def push(self, item: _Buffered) -> None:
        """Buffers a received frame; starts the clock once the jitter buffer is full."""
        self._buffer.append(item)
        # Re-sync: far behind real time, idle frames are the ones we can skip without losing speech.
        while len(self._buffer) > self._max_buffered:
            idle = next((b for b in self._buffer if b.frame.type == "idle"), None)
            if idle is None:
                break
            self._buffer.remove(idle)
            self.dropped += 1
        if not self._playing and len(self._buffer) >= self._jitter:
            self._playing = True
            self._start_playback.set()

    def has_speech(self) -> bool:
        return any(b.frame.is_speech for b in self._buffer)

    def drop_speech(self) -> None:
        """Barge-in: the speech frames not yet played are dropped (idle frames stay)."""
        self._buffer = deque(b for b in self._buffer if not b.frame.is_speech)

    # ---- the clock ------------------------------------------------------------------------------

    async def run(self, tick: Callable[[_Buffered], Awaitable[None]]) -> None:
        """Plays the buffer through ``tick``, one frame per 40 ms on absolute deadlines, until
        :meth:`close`. An underrun stops the clock until the jitter buffer is full again."""
        while not self._closed:
            await self._start_playback.wait()
            self._start_playback.clear()
            next_at = self._clock.now()
            while not self._closed:
                await self._clock.sleep_until(next_at)
                if self._closed:
                    return
                if not self._buffer:
                    # Underrun: stop the clock and wait for the jitter buffer to refill.
                    self.underruns += 1
                    self._playing = False
                    break
                item = self._buffer.popleft()
                next_at += FRAME_MS / 1000
                await tick(item)

    # ---- output ---------------------------------------------------------------------------------

    def put(self, tick: tuple[STVOutput, ...]) -> None:
        """Queues one played tick for the consumer (the oldest is dropped past ``max_output_frames``)."""
        if len(self._output) >= self._max_output:
            self._output.popleft()
            self.output_dropped += 1
        self._output.append(tick)
        self._output_ready.set()

    async def stream(self) -> AsyncIterator[STVOutput]:
        """The queued ticks' frames in order, until closed (after what is queued)."""
        while True:
            if self._output:
                for item in self._output.popleft():
                    yield item
                continue
            if self._closed:
                return
            self._output_ready.clear()
            await self._output_ready.wait()

    def close(self) -> None:
        """Ends the clock and, once it has read what is queued, the consumer."""
        self._closed = True
        self._start_playback.set()  # wakes the player so it can end
        self._output_ready.set()  # wakes the consumer, which ends once it has read what is queued
