"""The playout of SvcSTVClient (svc.playout) on a virtual clock (see stv_harness.py): the 25 fps
cadence, the jitter buffer, underruns, catching up with real time (far behind, after a stall) and
the bounded queue of output ticks, with their settings' validation.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from svc import STVAudioFrame, SvcSTVClient

from .helpers import ramp, settle
from .stv_harness import RGB, Harness, voiced


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
