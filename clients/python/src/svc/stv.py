"""SvcSTVClient: the high-level speech-to-video client.

Give it TTS audio at any sample rate; it sends a 16 kHz copy to the server, keeps the original,
and plays both back on a 25 fps clock: each tick yields the original audio that belongs to the
avatar frame shown with it (matched against the frame's own audio, see :mod:`svc.sync`). A small
jitter buffer absorbs network unevenness; after a barge-in (:meth:`SvcSTVClient.interrupt`),
queued speech is dropped here, speech frames still in flight from the server are discarded until
it confirms the cancel, and the clock re-syncs to the frames that follow. Same behaviour as
``transports/realtime/stv-client.ts``.

The jitter buffer, the clock and the queue of played ticks are :mod:`svc.playout`; this module is
the session, the turns, the audio sent and the events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import numpy as np

from .client import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_KEEP_ALIVE_S,
    RealtimeMessage,
    RealtimeTransport,
    SvcClient,
    SvcClientError,
)
from .clock import Clock, LoopClock
from .credentials import resolve_credentials
from .decode import Decoder, default_decoder
from .listeners import H, Handler, Listeners
from .pcm import EMPTY, join, to_mono
from .playout import DEFAULT_DRAIN_SLACK_FRAMES as DEFAULT_DRAIN_SLACK_FRAMES
from .playout import DEFAULT_JITTER_BUFFER_FRAMES as DEFAULT_JITTER_BUFFER_FRAMES
from .playout import DEFAULT_MAX_BUFFERED_FRAMES as DEFAULT_MAX_BUFFERED_FRAMES
from .playout import DEFAULT_MAX_OUTPUT_FRAMES as DEFAULT_MAX_OUTPUT_FRAMES
from .playout import Playout
from .playout import _Buffered as _Buffered
from .protocol import (
    FRAME_MS,
    SAMPLE_RATE,
    FrameOut,
    ServerMessage,
    int16_samples,
)
from .resample import Resampler, make_resampler
from .stv_frames import STVAudioFrame, STVEvent, STVOutput, STVVideoFrame
from .sync import LocalTurn
from .webrtc import WebRTCSettings

log = logging.getLogger("svc")

#: A cancel not confirmed (``turn_cancelled``) within this long (s) was lost (the server drops
#: control messages past its rate limit): speech frames play again instead of staying muted.
CANCEL_CONFIRM_S = 2.0


class SvcSTVClient:
    """Speech to video: TTS audio at any rate in, synchronized audio and video frames out.

    ``api_key`` and ``config_id`` default to :func:`svc.resolve_credentials`. ``webrtc`` makes the
    service publish the avatar into a room instead (``WEBRTC_CONNECTED`` confirms it).
    """

    def __init__(
        self,
        api_key: str | None = None,
        config_id: str | None = None,
        *,
        url: str | None = None,
        webrtc: WebRTCSettings | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        keep_alive_interval: float = DEFAULT_KEEP_ALIVE_S,
        output_sample_rate: int | None = None,
        jitter_buffer_frames: int = DEFAULT_JITTER_BUFFER_FRAMES,
        max_buffered_frames: int = DEFAULT_MAX_BUFFERED_FRAMES,
        drain_slack_frames: int = DEFAULT_DRAIN_SLACK_FRAMES,
        max_output_frames: int = DEFAULT_MAX_OUTPUT_FRAMES,
        decoder: Decoder | Literal["auto"] | None = "auto",
        resampler_factory: Callable[[int, int], Resampler] = make_resampler,
        clock: Clock | None = None,
        on_handler_error: Callable[[STVEvent, BaseException], None] | None = None,
        client: RealtimeTransport | None = None,
    ) -> None:
        if client is None:
            if api_key is None or config_id is None:
                creds = resolve_credentials()
                api_key = api_key or creds.api_key
                config_id = config_id or creds.config_id
            client = SvcClient(
                api_key,
                config_id,
                url=url,
                webrtc=webrtc,
                connect_timeout=connect_timeout,
                keep_alive_interval=keep_alive_interval,
                queue_messages=False,
            )
        self.client: RealtimeTransport = client
        self._clock: Clock = clock or LoopClock()
        self._decoder = default_decoder() if decoder == "auto" else decoder
        self._resampler_factory = resampler_factory
        self._playout = Playout(
            self._clock,
            jitter_buffer_frames=jitter_buffer_frames,
            max_buffered_frames=max_buffered_frames,
            drain_slack_frames=drain_slack_frames,
            max_output_frames=max_output_frames,
        )
        self._listeners = Listeners(STVEvent, "SvcSTVClient", on_handler_error)
        #: Utterances sent and not yet finished playing, oldest first.
        self._turns: list[LocalTurn] = []
        #: Cancels sent and not yet confirmed: speech frames arriving meanwhile belong to cancelled turns.
        self._unconfirmed_cancels = 0
        self._last_cancel_at = 0.0
        #: Bumped by interrupt(): a frame being emitted when it comes plays silent.
        self._epoch = 0
        self._output_rate = output_sample_rate
        self._to_server: Resampler | None = None
        self._to_output: Resampler | None = None
        self._player: asyncio.Task[None] | None = None
        self._turn_open = False
        self._first_frame_sent = False
        self._speaking = False
        self._closed = False
        self.session_data: ServerMessage | None = None
        #: Ticks played so far: the number of audio frames handed to output_stream().
        self.frames_played = 0

    @property
    def buffered_frames(self) -> int:
        """Frames received and not yet played: the playback latency, in 40 ms frames."""
        return self._playout.buffered_frames

    @property
    def underruns(self) -> int:
        """Ticks where no frame had arrived in time (diagnostics)."""
        return self._playout.underruns

    @property
    def dropped(self) -> int:
        """Frames dropped to catch up with real time (diagnostics)."""
        return self._playout.dropped

    @property
    def output_dropped(self) -> int:
        """Ticks of output dropped because the consumer left more than ``max_output_frames`` unread."""
        return self._playout.output_dropped

    @property
    def is_connected(self) -> bool:
        return self.client.is_connected

    # ---- events ---------------------------------------------------------------------------------

    def add_listener(self, event: STVEvent | str, handler: Handler) -> Callable[[], None]:
        """Calls ``handler(payload: dict)`` on ``event`` (sync or async); returns a remover. A handler
        that raises is reported to ``on_handler_error`` (default: logged) and never disturbs playback."""
        return self._listeners.add(event, handler)

    def remove_listener(self, event: STVEvent | str, handler: Handler) -> None:
        self._listeners.remove(event, handler)

    def on(self, event: STVEvent | str) -> Callable[[H], H]:
        """Decorator form of :meth:`add_listener`."""

        def register(handler: H) -> H:
            self.add_listener(event, handler)
            return handler

        return register

    def _emit(self, event: STVEvent, payload: dict[str, Any]) -> None:
        self._listeners.emit(event, payload)

    # ---- session --------------------------------------------------------------------------------

    async def connect(self) -> ServerMessage:
        """Opens the session; returns ``session_ready`` (raises SvcClientError with the server's code).
        A client connects once; after a failed connect() or close(), create a new one."""
        if self._player is not None:
            raise RuntimeError("connect() was already called on this SvcSTVClient; create a new one")
        self.client.subscribe(self._on_message, self._shutdown)
        self._player = asyncio.create_task(self._playout.run(self._tick), name="svc-stv-playback")
        try:
            ready = await self.client.connect()
        except BaseException:
            self._shutdown()
            raise
        self.session_data = ready
        self._emit(STVEvent.SESSION_READY, dict(ready))
        return ready

    start = connect

    async def close(self) -> None:
        await self.client.close()
        self._shutdown()
        if self._player is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._player

    async def __aenter__(self) -> SvcSTVClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- input ----------------------------------------------------------------------------------

    def _check_open(self, operation: str) -> None:
        """Input after close() (or after the connection was lost) is a caller error, never silently dropped."""
        if self._closed:
            raise SvcClientError(
                "closed", f"{operation}() after the session closed; create a new SvcSTVClient and connect() it"
            )
        if self._player is None:
            raise SvcClientError("not_connected", f"{operation}() before connect()")

    async def start_turn(self) -> None:
        """Starts an utterance (ends an open one first); call once per utterance."""
        self._check_open("start_turn")
        await self.end_turn()
        self._turn_open = True
        self._turns.append(LocalTurn())
        await self.client.start_turn()

    async def send_tts_audio(self, pcm: Any, sample_rate: int, num_channels: int = 1) -> None:
        """Queues TTS audio: int16 at any rate, mono or multi-channel (averaged to mono): interleaved
        1-D samples, or an array of shape ``(frames, num_channels)``. Raises ``TypeError`` for samples
        that are not int16, ``ValueError`` for a bad rate or channel layout, and
        :class:`~svc.client.SvcClientError` once the session is closed."""
        mono = to_mono(int16_samples(pcm), num_channels)
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) or not (
            1_000 <= sample_rate <= 384_000
        ):
            raise ValueError(f"sample_rate must be an integer number of Hz in [1000, 384000], got {sample_rate!r}")
        sample_rate = int(sample_rate)
        self._check_open("send_tts_audio")
        if self._output_rate is None:
            self._output_rate = sample_rate
        epoch = self._epoch
        if not self._turn_open:
            await self.start_turn()
            if epoch != self._epoch or not self._turns:
                return  # interrupted while the turn was being started: this audio is not played
        turn = self._turns[-1]
        # The rate changed mid-utterance: the previous resamplers' tails come first.
        server_tail = local_tail = EMPTY
        if self._to_server is not None and self._to_server.from_rate != sample_rate:
            server_tail, self._to_server = self._to_server.flush(), None
        if self._to_output is not None and self._to_output.from_rate != sample_rate:
            local_tail, self._to_output = self._to_output.flush(), None
        if self._to_server is None:
            self._to_server = self._resampler_factory(sample_rate, SAMPLE_RATE)
        to_server = join(server_tail, self._to_server.process(mono))
        local = mono
        if sample_rate != self._output_rate:
            if self._to_output is None:
                self._to_output = self._resampler_factory(sample_rate, self._output_rate)
            local = self._to_output.process(mono)
        local = join(local_tail, local)
        turn.sent.push(to_server)
        turn.original.push(local)
        if len(to_server):  # a resampler may hold everything back until more audio comes
            await self.client.send_audio(to_server)

    async def end_turn(self) -> None:
        """No more audio for this utterance (flushes the resamplers, marks the end of turn)."""
        self._check_open("end_turn")
        if not self._turn_open:
            return
        self._turn_open = False
        turn = self._turns[-1]
        tail = self._to_server.flush() if self._to_server is not None else np.zeros(0, dtype=np.int16)
        turn.sent.push(tail)
        if self._to_output is not None:
            turn.original.push(self._to_output.flush())
        turn.ended = True
        # An utterance without audio never shows on the server: nothing will ever play it.
        if not turn.has_audio:
            self._turns.pop()
        self._to_server = None
        self._to_output = None
        await self.client.send_audio(tail, end_of_turn=True)

    async def say(self, pcm: Any, sample_rate: int, num_channels: int = 1) -> None:
        """One-shot: a whole utterance (``start_turn()`` + ``send_tts_audio()`` + ``end_turn()``)."""
        to_mono(int16_samples(pcm), num_channels)  # bad input fails before a turn is opened
        # An interrupt() during any of these awaits ends the utterance: nothing more of it is sent.
        epoch = self._epoch
        await self.start_turn()
        if epoch != self._epoch:
            return
        await self.send_tts_audio(pcm, sample_rate, num_channels)
        if epoch != self._epoch:
            return
        await self.end_turn()

    async def interrupt(self) -> bool:
        """Barge-in: drops queued speech here and asks the server to cancel. Returns whether a
        server-side cancel was actually sent (False when nothing was speaking or queued, or closed)."""
        active = self._turn_open or bool(self._turns) or self._speaking or self._playout.has_speech()
        if not active:
            return False
        self._epoch += 1
        self._playout.drop_speech()
        self._turns = []
        self._turn_open = False
        self._to_server = None
        self._to_output = None
        if self._speaking:
            self._speaking = False
            self._emit(STVEvent.BOT_STOPPED_SPEAKING, {"interrupted": True})
        # Counted before the await: speech frames arriving while the cancel is being written are
        # already those of the cancelled turn.
        self._unconfirmed_cancels += 1
        self._last_cancel_at = self._clock.now()
        sent = await self.client.cancel()
        if not sent:
            self._unconfirmed_cancels -= 1
        return sent

    # ---- output ---------------------------------------------------------------------------------

    @property
    def output_queued_frames(self) -> int:
        """Ticks of output waiting for the consumer of :meth:`output_stream` (at most ``max_output_frames``)."""
        return self._playout.output_queued_frames

    def output_stream(self) -> AsyncIterator[STVOutput]:
        """Synchronized audio and video, one audio frame (and, when the picture arrived, one video
        frame) per 40 ms tick, until the session closes. One consumer."""
        return self._playout.stream()

    # ---- internals ------------------------------------------------------------------------------

    def _on_message(self, m: RealtimeMessage) -> None:
        if isinstance(m, FrameOut):
            self._receive(m)
            return
        kind = m.get("type")
        if kind == "turn_cancelled":
            self._unconfirmed_cancels = max(0, self._unconfirmed_cancels - 1)
            self._emit(STVEvent.INTERRUPTED, {"turn_id": m.get("turn_id"), "had_speech": m.get("had_speech")})
        elif kind == "webrtc_connected":
            self._emit(STVEvent.WEBRTC_CONNECTED, {"participant_id": m.get("participant_id"), "room": m.get("room")})
        elif kind == "error":
            self._emit(STVEvent.ERROR, {"message": m.get("message"), "code": m.get("code"), "fatal": m.get("fatal")})

    def _receive(self, frame: FrameOut) -> None:
        if self._closed:
            return
        # A cancel never confirmed (the server dropped it: more than its control messages a second)
        # must not mute every later turn: after a bound it is taken for lost.
        if self._unconfirmed_cancels > 0 and self._clock.now() - self._last_cancel_at > CANCEL_CONFIRM_S:
            self._unconfirmed_cancels = 0
        if frame.is_speech and self._unconfirmed_cancels > 0:
            return  # speech of a cancelled turn, already in flight
        rate = self._output_rate or SAMPLE_RATE
        samples_out = (rate * FRAME_MS + 500) // 1000
        turn = self._turn_of(frame.turn_id) if frame.is_speech else None
        pcm = turn.audio_for(frame.audio, rate, samples_out) if turn else np.zeros(samples_out, dtype=np.int16)
        if frame.final and frame.turn_id is not None:
            self._turns = [t for t in self._turns if t.server_turn_id != frame.turn_id]
        if self._playout.skips(frame):
            return
        self._playout.push(_Buffered(frame, self._decode(frame), pcm, rate))

    def _decode(self, frame: FrameOut) -> asyncio.Future[bytes | None] | None:
        if frame.image is None:
            return None
        loop = asyncio.get_running_loop()
        if frame.image_format == "rgb":
            done: asyncio.Future[bytes | None] = loop.create_future()
            done.set_result(frame.image if len(frame.image) == frame.width * frame.height * 3 else None)
            return done
        decoder = self._decoder
        if decoder is None:
            return None
        expected = frame.width * frame.height * 3

        def run(image: bytes = frame.image, w: int = frame.width, h: int = frame.height) -> bytes | None:
            try:
                rgb = decoder(image, w, h)
            except Exception:
                return None
            return rgb if rgb is not None and len(rgb) == expected else None

        return loop.run_in_executor(None, run)

    def _turn_of(self, server_turn_id: int | None) -> LocalTurn | None:
        """The local utterance a server turn id belongs to: utterances with audio map to server turns in order."""
        if server_turn_id is None:
            return None
        for t in self._turns:
            if t.server_turn_id == server_turn_id:
                return t
        for t in self._turns:
            if t.server_turn_id is None and t.has_audio:
                t.server_turn_id = server_turn_id
                return t
        return None

    async def _tick(self, item: _Buffered) -> None:
        frame = item.frame
        epoch = self._epoch
        rgb: bytes | None = None
        if item.rgb is not None:
            # Decoding may take longer than a tick; the absolute deadlines catch up afterwards.
            rgb = await item.rgb
        if self._closed:
            return
        # interrupt() came while this frame was being prepared: its speech is silenced and starts nothing.
        speech = frame.is_speech and epoch == self._epoch
        pcm = np.zeros_like(item.pcm) if frame.is_speech and not speech else item.pcm
        if not self._first_frame_sent:
            self._first_frame_sent = True
            self._emit(STVEvent.FIRST_FRAME, {"frame_type": frame.type, "frame_index": frame.index})
        if speech and not self._speaking:
            self._speaking = True
            self._emit(STVEvent.BOT_STARTED_SPEAKING, {"turn_id": frame.turn_id})
        audio = STVAudioFrame(pcm=pcm, sample_rate=item.rate, pts_ms=frame.pts_ms, frame_index=frame.index)
        self.frames_played += 1
        tick: tuple[STVOutput, ...] = (audio,)
        if frame.image is not None:
            tick = (
                audio,
                STVVideoFrame(
                    rgb=rgb,
                    width=frame.width,
                    height=frame.height,
                    pts_ms=frame.pts_ms,
                    frame_index=frame.index,
                    frame_type=frame.type,
                    image=frame.image,
                    image_format=frame.image_format,
                ),
            )
        self._playout.put(tick)
        if frame.final and self._speaking and epoch == self._epoch:
            self._speaking = False
            self._emit(STVEvent.BOT_STOPPED_SPEAKING, {"turn_id": frame.turn_id})

    def _shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._playout.close()  # wakes the player so it can end, and the consumer once it has read what is queued
        if self._player is not None and not self._player.done():
            self._player.cancel()
        self._emit(STVEvent.CLOSED, {})
