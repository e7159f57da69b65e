"""SvcSTVClient (over the real SvcClient) on a virtual clock, with the test playing the server
through an in-process WebSocket server (see stv_harness.py): the audio sent and played (rates,
resampling, A/V matching), barge-in and its re-sync, events, failing handlers, close, pictures.
The playout itself (cadence, jitter buffer, catch-up, output queue) is test_stv_playout.py.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import numpy as np
import pytest

from svc import STVEvent
from svc.resample import LinearResampler

from .helpers import make_frame, ramp, settle, speech_frames
from .stv_harness import RGB, Harness, voiced


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
