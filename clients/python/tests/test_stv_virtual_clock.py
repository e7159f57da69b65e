"""SvcSTVClient (over the real SvcClient) on a virtual clock, with the test playing the server
through an in-process WebSocket server (PlayedServer).

Every output is stamped with the virtual time it came out at, so the 25 fps cadence, the jitter
buffer, underruns and the barge-in re-sync are checked exactly, without real-time sleeps.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import numpy as np
import pytest

from svc import STVAudioFrame, STVEvent, STVVideoFrame, SvcSTVClient
from svc.resample import LinearResampler

from .helpers import PlayedServer, VirtualClock, make_frame, ramp, settle, speech_frames

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


async def test_a_25_fps_clock_with_a_jitter_buffer_and_underruns() -> None:
    h = await Harness(drain_slack_frames=25).start()  # the burst below is kept whole: this is about the clock
    h.push_idle(1)
    await h.ticks(3)
    assert h.out == [], "one frame is not enough: the jitter buffer waits for two"
    h.push_idle(9)
    await h.ticks(15)
    times = [round((t - h.t0) * 1000) for t, o in h.out if isinstance(o, STVAudioFrame)]
    start = times[0]
    assert times == [start + 40 * k for k in range(10)], "one audio frame every 40 ms, on absolute deadlines"
    assert [a.frame_index for a in h.audio] == list(range(10))
    assert [v.frame_index for v in h.video] == list(range(10)), "each picture comes with its audio"
    assert all(v.rgb == RGB and (v.width, v.height) == (4, 2) for v in h.video)
    assert all(len(a.pcm) == 640 and a.sample_rate == 16_000 for a in h.audio), "before any TTS: 16 kHz"
    assert h.client.underruns == 1, "the buffer ran dry once and the clock stopped"
    assert h.client.frames_played == 10
    h.push_idle(1)
    await h.ticks(3)
    assert len(h.audio) == 10, "after an underrun the jitter buffer refills first"
    h.push_idle(1)
    await h.ticks(1)
    assert len(h.audio) == 12
    await h.close()


async def test_frames_without_a_picture_yield_audio_only() -> None:
    h = await Harness().start()
    h.push_idle(2, image=None)
    h.push_idle(1)
    await h.ticks(3)
    assert [a.frame_index for a in h.audio] == [0, 1, 2]
    assert [v.frame_index for v in h.video] == [2]
    await h.close()


async def test_say_sends_a_16k_copy_and_plays_the_original_at_its_own_rate_with_events() -> None:
    h = await Harness(resampler_factory=LinearResampler).start()
    original = ramp(300, 24_000)
    await h.client.say(original, 24_000)
    await h.sync()
    assert h.fake.control == ["start_turn"]
    assert [eot for _, eot in h.fake.audio] == [False, True], "the audio, then the resampler tail ending the turn"
    assert len(h.fake.sent) == 4800, "300 ms at 16 kHz"
    expected = LinearResampler(24_000, 16_000)
    assert np.array_equal(h.fake.sent, np.concatenate([expected.process(original), expected.flush()]))
    h.push_idle(2)
    h.push_speech(h.fake.sent, turn_id=1)
    h.push_idle(3)
    await h.ticks(20)
    assert all(a.sample_rate == 24_000 and len(a.pcm) == 960 for a in h.audio[2:])
    assert np.array_equal(voiced(h.audio), original), "the original 24 kHz audio, complete and in order"
    assert h.names()[:4] == ["SESSION_READY", "FIRST_FRAME", "BOT_STARTED_SPEAKING", "BOT_STOPPED_SPEAKING"]
    assert h.payload(STVEvent.FIRST_FRAME) == {"frame_type": "idle", "frame_index": 0}
    assert h.payload(STVEvent.BOT_STARTED_SPEAKING) == {"turn_id": 1}
    assert h.payload(STVEvent.BOT_STOPPED_SPEAKING) == {"turn_id": 1}
    assert h.payload(STVEvent.SESSION_READY)["session_id"] == "s1"
    stopped_at = [i for i, a in enumerate(h.audio) if a.frame_index == 2 + 8 + 2 - 1]
    assert stopped_at, "the final fade-out frame was played"
    await h.close()


async def test_streaming_tts_slower_than_real_time_stays_aligned() -> None:
    h = await Harness().start()
    first, second = ramp(100, 16_000, start=100), ramp(130, 16_000, start=9000)
    await h.client.start_turn()
    await h.sync()
    await h.client.send_tts_audio(first, 16_000)
    await h.sync()
    # The server animates the first 100 ms (2.5 frames), then waits for audio: silent speech frames.
    sent = h.fake.sent
    frames = speech_frames(sent, 0, 1, fade=0)
    frames[-1] = make_frame(2, "speech", turn_id=1, audio=sent[1280:], image=RGB)
    for f in frames:
        h.fake.push(f)
    for i in range(3, 6):
        h.fake.push(make_frame(i, "speech", turn_id=1, image=RGB))
    await h.client.send_tts_audio(second, 16_000)
    await h.sync()
    await h.client.end_turn()
    await h.sync()
    rest = h.fake.sent[len(sent) :]
    for f in speech_frames(rest, 6, 1):
        h.fake.push(make_frame(f.index, "speech" if f.is_speech else f.type, turn_id=1, audio=f.audio,
                               final=f.final, image=RGB))
    await h.ticks(20)
    played = h.audio
    assert np.array_equal(voiced(played), np.concatenate([first, second]))
    for a in played:
        assert np.array_equal(a.pcm, speech_or_silence(h, a.frame_index)), f"frame {a.frame_index}"
    await h.close()


def speech_or_silence(h: Harness, index: int) -> np.ndarray:
    """The audio the fake server animated frame ``index`` with (16 kHz in and out: no resampling)."""
    sent = h.fake.sent
    # frames 0..2 carry sent[0:1600]; 3..5 nothing; 6.. the rest in 640-sample windows
    if index <= 2:
        window = sent[index * 640 : min(1600, (index + 1) * 640)]
    elif index <= 5:
        window = np.zeros(0, dtype=np.int16)
    else:
        start = 1600 + (index - 6) * 640
        window = sent[start : start + 640] if start < len(sent) else np.zeros(0, dtype=np.int16)
    out = np.zeros(640, dtype=np.int16)
    out[: len(window)] = window
    return out


async def test_interrupt_drops_queued_speech_ignores_speech_in_flight_and_resyncs() -> None:
    h = await Harness().start()
    assert await h.client.interrupt() is False, "nothing to interrupt"
    assert "cancel" not in h.fake.control
    first = ramp(1000, 16_000, start=100)
    await h.client.say(first, 16_000)
    await h.sync()
    h.push_idle(2)
    h.push_speech(h.fake.sent, turn_id=1, count=8)
    await h.ticks(4)
    assert len(voiced(h.audio)) > 0, "speech is playing"
    assert await h.client.interrupt() is True
    await h.sync()
    assert h.fake.control == ["start_turn", "cancel"]
    assert h.payload(STVEvent.BOT_STOPPED_SPEAKING) == {"interrupted": True}
    played_at_interrupt = len(h.audio)
    # Frames of the cancelled turn still in flight, then the server's confirmation and idle frames.
    h.push_speech(h.fake.sent, turn_id=1, count=6, skip=8)
    h.fake.push({"type": "turn_cancelled", "turn_id": 1, "had_speech": True})
    h.push_idle(4)
    await h.ticks(8)
    assert h.payload(STVEvent.INTERRUPTED) == {"turn_id": 1, "had_speech": True}
    assert not voiced(h.audio[played_at_interrupt:]).any(), "nothing of the cancelled turn plays"
    assert len(h.audio) >= played_at_interrupt + 4, "the clock kept running on idle frames"
    second = (-ramp(200, 16_000, start=50)).astype(np.int16)
    before = len(h.fake.sent)
    await h.client.say(second, 16_000)
    await h.sync()
    h.push_speech(h.fake.sent[before:], turn_id=2)
    h.push_idle(2)
    await h.ticks(15)
    after = h.audio[played_at_interrupt:]
    assert np.array_equal(voiced(after), second), "the next utterance plays whole and in sync"
    started = [p for e, p in h.events if e == STVEvent.BOT_STARTED_SPEAKING]
    assert started == [{"turn_id": 1}, {"turn_id": 2}]
    assert h.names().count("BOT_STOPPED_SPEAKING") == 2
    assert await h.client.interrupt() is False, "nothing left to interrupt"
    await h.close()


async def test_interrupt_returns_false_when_the_cancel_cannot_be_sent() -> None:
    h = await Harness().start()
    await h.client.say(ramp(200, 16_000), 16_000)
    await h.sync()
    await h.fake.close()  # the socket is gone: the cancel cannot be sent
    await asyncio.wait_for(h.pump, 5)
    assert await h.client.interrupt() is False
    await h.close()


async def test_far_behind_real_time_idle_frames_are_dropped_never_speech() -> None:
    h = await Harness(max_buffered_frames=10).start()
    speech = ramp(200, 16_000)
    await h.client.say(speech, 16_000)
    await h.sync()
    h.push_idle(12)
    h.push_speech(h.fake.sent, turn_id=1)  # 5 speech + 2 fade-out frames
    h.push_idle(12)
    await h.sync()
    # 31 frames arrived while the clock stood still: at most 10 stay buffered. The clock may have
    # played one frame on starting, before the buffer filled (then one more fit, and 20 were
    # dropped) or after it (21 dropped, 9 left): frames arrive in socket batches, and which comes
    # first is the event loop's order (local CI run F2, under a CPU hog, had the second).
    played = h.client.frames_played
    assert played <= 1
    assert h.client.dropped in (31 - 10 - played, 31 - 10)
    assert h.client.dropped + h.client.buffered_frames + played == 31, "every frame played, buffered or dropped"
    assert h.client.buffered_frames <= 10
    await h.ticks(15)
    indices = [a.frame_index for a in h.audio]
    assert indices == sorted(indices) and len(indices) == 31 - h.client.dropped
    assert np.array_equal(voiced(h.audio), speech)
    await h.close()


async def test_after_a_stall_the_buffer_drains_back_during_silence_and_speech_then_starts_at_once() -> None:
    h = await Harness().start()
    h.push_idle(3)
    await h.ticks(3)
    # A stall: 12 frames arrive at once (the network or this process held them).
    h.push_idle(12)
    await h.sync()
    stalled = h.client.buffered_frames
    # Then frames arrive one per tick again: idle frames beyond jitter + slack are skipped.
    for _ in range(12):
        h.push_idle(1)
        await h.ticks(1)
    assert h.client.buffered_frames <= 2 + 2, f"{h.client.buffered_frames} frames still queued (was {stalled})"
    assert h.client.dropped > 0
    # Speech is never skipped, and now plays within jitter + slack ticks of its arrival.
    speech = ramp(200, 16_000)
    await h.client.say(speech, 16_000)
    await h.sync()
    played_before = h.client.frames_played
    h.push_speech(h.fake.sent, turn_id=1)
    await h.ticks(12)
    first_voiced = next(i for i, a in enumerate(h.audio) if a.frame_index >= h.index - 7)
    assert first_voiced - played_before <= 4
    assert np.array_equal(voiced(h.audio), speech)
    await h.close()


async def test_a_consumer_that_stops_reading_holds_at_most_max_output_frames_ticks_the_newest() -> None:
    h = await Harness(max_output_frames=5, drain_slack_frames=100, max_buffered_frames=100).start(pump=False)
    h.push_idle(20)
    await h.ticks(25)
    # Nobody read: the clock played all 20 frames, and only the newest 5 ticks wait.
    assert h.client.frames_played == 20
    assert h.client.output_dropped == 15
    assert h.client.output_queued_frames == 5
    h.pump = asyncio.create_task(h._pump())
    await settle()
    assert [a.frame_index for a in h.audio] == list(range(15, 20)), "the newest ticks, in order"
    assert [v.frame_index for v in h.video] == list(range(15, 20)), "each with its picture"
    # A consumer that reads in real time loses nothing.
    h.push_idle(10)
    await h.ticks(12)
    assert h.client.output_dropped == 15
    assert [a.frame_index for a in h.audio] == list(range(15, 30))
    await h.close()


async def test_max_output_frames_defaults_to_2_s_and_is_validated() -> None:
    from svc.stv import DEFAULT_MAX_OUTPUT_FRAMES

    assert DEFAULT_MAX_OUTPUT_FRAMES == 50
    with pytest.raises(ValueError):
        SvcSTVClient("k", "c", url="ws://127.0.0.1:9", max_output_frames=0)


async def test_drain_slack_is_validated() -> None:
    with pytest.raises(ValueError):
        SvcSTVClient("k", "c", url="ws://127.0.0.1:9", drain_slack_frames=-1)


async def test_stereo_input_is_averaged_to_mono() -> None:
    h = await Harness().start()
    left, right = ramp(100, 16_000, start=100), ramp(100, 16_000, start=301)
    interleaved = np.stack([left, right], axis=1).reshape(-1)
    await h.client.say(interleaved, 16_000, num_channels=2)
    await h.sync()
    assert np.array_equal(h.fake.sent, ((left.astype(int) + right + 1) // 2).astype(np.int16)), "rounded half up"
    await h.close()


async def test_failing_handlers_never_break_playback_and_the_decorator_works() -> None:
    h = await Harness().start()
    seen: list[str] = []

    @h.client.on(STVEvent.BOT_STARTED_SPEAKING)
    def broken(payload: dict[str, Any]) -> None:
        raise RuntimeError("a broken handler")

    @h.client.on("BOT_STARTED_SPEAKING")
    async def broken_async(payload: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        raise RuntimeError("a broken async handler")

    @h.client.on("BOT_STOPPED_SPEAKING")
    async def fine(payload: dict[str, Any]) -> None:
        seen.append(f"stopped {payload['turn_id']}")

    remove = h.client.add_listener("FIRST_FRAME", lambda p: seen.append("first"))
    remove()
    speech = ramp(120, 16_000)
    await h.client.say(speech, 16_000)
    await h.sync()
    h.push_speech(h.fake.sent, turn_id=1)
    h.push_idle(2)
    await h.ticks(10)
    await settle()
    assert np.array_equal(voiced(h.audio), speech), "playback went on"
    assert sorted(h.handler_errors) == [
        (STVEvent.BOT_STARTED_SPEAKING, "a broken async handler"),
        (STVEvent.BOT_STARTED_SPEAKING, "a broken handler"),
    ]
    assert seen == ["stopped 1"], "the async handler ran; the removed one did not"
    with pytest.raises(ValueError):
        h.client.add_listener("NOT_AN_EVENT", lambda p: None)
    await h.close()


async def test_close_emits_closed_once_and_ends_the_stream() -> None:
    h = await Harness().start()
    h.push_idle(3)
    await h.ticks(2)
    assert h.client.is_connected
    await h.close()
    await h.client.close()
    assert h.pump.done()
    assert h.names().count("CLOSED") == 1 and h.names()[-1] == "CLOSED"
    assert not h.client.is_connected


async def test_a_server_side_close_also_ends_the_session() -> None:
    h = await Harness().start()
    await h.fake.close()  # the server closes the socket (1000)
    await asyncio.wait_for(h.pump, 5)
    assert h.names()[-1] == "CLOSED" and "ERROR" not in h.names(), "a normal close is no error"
    assert not h.client.is_connected
    await h.close()


async def test_error_and_webrtc_events_carry_their_fields() -> None:
    h = await Harness().start()
    h.fake.push({"type": "error", "code": "rate_limited", "message": "slow down", "fatal": False})
    h.fake.push({"type": "webrtc_connected", "participant_id": "pub_1", "room": "r1"})
    await h.sync()
    assert h.payload(STVEvent.ERROR) == {"message": "slow down", "code": "rate_limited", "fatal": False}
    assert h.payload(STVEvent.WEBRTC_CONNECTED) == {"participant_id": "pub_1", "room": "r1"}
    await h.close()


async def test_jpeg_pictures_are_decoded_to_rgb_or_passed_through_without_a_decoder() -> None:
    image_mod = pytest.importorskip("PIL.Image")
    buf = io.BytesIO()
    image_mod.new("RGB", (16, 8), (200, 30, 60)).save(buf, format="JPEG", quality=95)
    jpeg = buf.getvalue()
    for decoder in ("auto", None):
        h = await Harness(decoder=decoder).start()
        for i in range(3):
            h.fake.push(make_frame(i, "idle", image=jpeg, image_format="jpeg", width=16, height=8))
        await h.ticks(3)
        for _ in range(100):
            if len(h.video) >= 3:
                break
            await asyncio.sleep(0.01)  # decoding runs on a worker thread
        assert len(h.video) == 3
        for v in h.video:
            assert v.image == jpeg and v.image_format == "jpeg"
            if decoder is None:
                assert v.rgb is None
            else:
                assert v.rgb is not None and len(v.rgb) == 16 * 8 * 3
                pixel = np.frombuffer(v.rgb, dtype=np.uint8).reshape(8, 16, 3)[4, 8]
                assert np.all(np.abs(pixel.astype(int) - [200, 30, 60]) < 12)
        await h.close()


async def test_frames_buffered_before_the_first_tts_keep_the_rate_of_their_audio() -> None:
    h = await Harness().start()
    h.push_idle(5)  # buffered while the output rate is still unknown (16 kHz until the first TTS)
    await h.sync()
    original = ramp(120, 24_000)
    await h.client.say(original, 24_000)
    await h.sync()
    h.push_speech(h.fake.sent, turn_id=1)
    await h.ticks(12)
    assert {a.sample_rate for a in h.audio} == {16_000, 24_000}
    assert all(len(a.pcm) == a.sample_rate * 40 // 1000 for a in h.audio), "each frame's pcm is 40 ms at its rate"
    assert np.array_equal(voiced(h.audio), original)
    await h.close()


async def test_an_utterance_sent_right_after_interrupt_plays_whole_despite_speech_still_in_flight() -> None:
    h = await Harness().start()
    first = ramp(1000, 16_000, start=100)
    await h.client.say(first, 16_000)
    await h.sync()
    h.push_idle(2)
    h.push_speech(h.fake.sent, turn_id=1, count=5)
    await h.ticks(4)
    cut = h.client.frames_played
    assert await h.client.interrupt() is True
    second = (-ramp(300, 16_000, start=50)).astype(np.int16)
    before = len(h.fake.sent)
    await h.client.say(second, 16_000)  # before the server confirmed the cancel
    await h.sync()
    assert h.fake.control == ["start_turn", "cancel", "start_turn"]
    h.push_speech(h.fake.sent[:before], turn_id=1, count=4, skip=5)  # turn 1, already in flight
    h.fake.push({"type": "turn_cancelled", "turn_id": 1, "had_speech": True})
    h.push_speech(h.fake.sent[before:], turn_id=2)
    h.push_idle(2)
    await h.ticks(20)
    assert np.array_equal(voiced(h.audio[cut:]), second)
    assert [p for e, p in h.events if e == STVEvent.BOT_STARTED_SPEAKING] == [{"turn_id": 1}, {"turn_id": 2}]
    with pytest.raises(RuntimeError):
        await h.client.connect()
    await h.close()


async def test_a_rate_change_mid_utterance_keeps_every_sample() -> None:
    h = await Harness(resampler_factory=LinearResampler, output_sample_rate=48_000).start()
    a, b = ramp(100, 24_000, start=100), ramp(100, 16_000, start=7000)
    await h.client.start_turn()
    await h.sync()
    await h.client.send_tts_audio(a, 24_000)
    await h.sync()
    await h.client.send_tts_audio(b, 16_000)
    await h.sync()
    await h.client.end_turn()
    await h.sync()
    first = LinearResampler(24_000, 16_000)
    expected_sent = np.concatenate([first.process(a), first.flush(), b])
    assert np.array_equal(h.fake.sent, expected_sent), "the 24 kHz resampler's tail was sent before the 16 kHz audio"
    up_a, up_b = LinearResampler(24_000, 48_000), LinearResampler(16_000, 48_000)
    expected_local = np.concatenate([up_a.process(a), up_a.flush(), up_b.process(b), up_b.flush()])
    h.push_speech(h.fake.sent, turn_id=1)
    h.push_idle(2)
    await h.ticks(15)
    played = voiced(h.audio)
    assert np.array_equal(played, expected_local[expected_local != 0])
    await h.close()


def _yielding_sends(h: Harness) -> None:
    """The socket's sends wait once each, as they do under flow control on a real network: an
    interrupt() from another task can land between the chunks of one utterance."""
    ws = h.client.client._ws  # type: ignore[attr-defined]
    original = ws.send

    async def send(message: Any) -> None:
        await asyncio.sleep(0)
        await original(message)

    ws.send = send


async def test_interrupt_during_say_sends_nothing_more_of_the_utterance() -> None:
    h = await Harness().start()
    _yielding_sends(h)
    saying = asyncio.create_task(h.client.say(ramp(5_000, 16_000), 16_000))  # 5 chunks of 1 s
    for _ in range(3):
        await asyncio.sleep(0)  # the turn started, its first chunk on its way
    assert await h.client.interrupt() is True
    await asyncio.wait_for(saying, 5)  # returns, no IndexError
    await h.sync()
    cancel = h.fake.order.index("cancel")
    assert "audio" not in h.fake.order[cancel + 1 :], h.fake.order
    assert h.fake.order.count("audio") < 5, "not the whole utterance"
    assert "start_turn" not in h.fake.order[cancel + 1 :], "no new turn opened by the rest"
    await h.close()


async def test_interrupt_while_send_tts_audio_starts_its_turn_drops_that_audio() -> None:
    h = await Harness().start()
    _yielding_sends(h)
    sending = asyncio.create_task(h.client.send_tts_audio(ramp(400, 24_000), 24_000))
    await asyncio.sleep(0)  # inside start_turn's send
    assert await h.client.interrupt() is True
    await asyncio.wait_for(sending, 5)  # no IndexError on the turn the interrupt removed
    await h.sync()
    assert h.fake.order.count("audio") == 0, h.fake.order
    # The next utterance is whole.
    await h.client.say(ramp(200, 16_000), 16_000)
    await h.sync()
    assert h.fake.order[-1] == "audio" and h.fake.audio[-1][1] is True
    await h.close()


async def test_a_cancel_the_server_never_confirms_does_not_mute_later_turns() -> None:
    h = await Harness().start()
    first = ramp(400, 16_000, start=100)
    await h.client.say(first, 16_000)
    await h.sync()
    h.push_idle(2)
    h.push_speech(h.fake.sent, turn_id=1, count=3)
    await h.ticks(4)
    assert await h.client.interrupt() is True  # the server drops it (past its control message rate): no turn_cancelled
    await h.sync()
    await h.ticks(75)  # 3 s: past the confirmation bound
    cut = h.client.frames_played
    second = (-ramp(300, 16_000, start=50)).astype(np.int16)
    before = len(h.fake.sent)
    await h.client.say(second, 16_000)
    await h.sync()
    h.push_speech(h.fake.sent[before:], turn_id=2)
    h.push_idle(2)
    await h.ticks(20)
    assert np.array_equal(voiced(h.audio[cut:]), second), "the next turn is heard"
    await h.close()
