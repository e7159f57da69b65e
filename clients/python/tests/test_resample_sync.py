"""Resamplers (streaming, time-aligned) and the frame <-> original audio matching (svc.sync)."""

from __future__ import annotations

import numpy as np
import pytest

from svc.resample import IdentityResampler, LinearResampler, SoxrResampler, have_soxr, make_resampler
from svc.sync import LocalTurn, consumed_at

from .helpers import ramp


def stream(resampler, pcm: np.ndarray, chunk: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    parts = [resampler.process(pcm[i : i + chunk]) for i in range(0, len(pcm), chunk)]
    parts.append(resampler.flush())
    return np.concatenate(parts)


def tone(rate: int, ms: int, hz: float = 440.0) -> np.ndarray:
    t = np.arange(rate * ms // 1000) / rate
    return (np.sin(2 * np.pi * hz * t) * 12_000).astype(np.int16)


@pytest.mark.parametrize(("src", "dst"), [(24_000, 16_000), (16_000, 24_000), (44_100, 16_000), (8_000, 16_000)])
def test_linear_resampler_streams_like_one_shot_and_keeps_time(src: int, dst: int) -> None:
    pcm = tone(src, 500)
    whole = stream(LinearResampler(src, dst), pcm, len(pcm))
    chunked = stream(LinearResampler(src, dst), pcm, 333)
    assert np.array_equal(whole, chunked), "chunking does not change the output"
    assert abs(len(whole) - len(pcm) * dst / src) <= 1
    # Time-aligned: output n is the input at n*src/dst (here compared with the ideal sine).
    ideal = (np.sin(2 * np.pi * 440 * np.arange(len(whole)) / dst) * 12_000)
    assert np.max(np.abs(whole[: len(whole) - 2] - ideal[: len(whole) - 2])) < 12_000 * 0.05


@pytest.mark.skipif(not have_soxr(), reason="soxr ([stv] extra) not installed")
def test_soxr_resampler_is_streaming_and_time_aligned() -> None:
    pcm = tone(24_000, 1000)
    out = stream(SoxrResampler(24_000, 16_000), pcm, 480)
    assert abs(len(out) - 16_000) <= 2
    ideal = np.sin(2 * np.pi * 440 * np.arange(len(out)) / 16_000) * 12_000
    middle = slice(400, len(out) - 400)
    assert np.max(np.abs(out[middle] - ideal[middle])) < 12_000 * 0.02
    assert isinstance(make_resampler(24_000, 16_000), SoxrResampler)


def test_identity_when_rates_match() -> None:
    r = make_resampler(16_000, 16_000)
    assert isinstance(r, IdentityResampler)
    pcm = ramp(10, 16_000)
    assert np.array_equal(r.process(pcm), pcm) and len(r.flush()) == 0


def turn_with(sent: np.ndarray, original: np.ndarray) -> LocalTurn:
    turn = LocalTurn()
    turn.sent.push(sent)
    turn.original.push(original)
    return turn


def test_full_frames_map_to_the_matching_original_audio() -> None:
    sent = ramp(200, 16_000)  # 3200 samples = 5 frames
    original = ramp(200, 24_000, start=5000)  # 4800 samples
    turn = turn_with(sent, original)
    for k in range(5):
        out = turn.audio_for(sent[k * 640 : (k + 1) * 640], 24_000, 960)
        assert np.array_equal(out, original[k * 960 : (k + 1) * 960]), f"frame {k}"


def test_an_underrun_frame_consumes_nothing_and_a_short_tail_is_padded() -> None:
    sent = ramp(50, 16_000)  # 800 samples: one full frame and 160 samples
    turn = turn_with(sent, sent)
    assert np.array_equal(turn.audio_for(sent[:640], 16_000, 640), sent[:640])
    silent = turn.audio_for(np.zeros(640, dtype=np.int16), 16_000, 640)
    assert not silent.any(), "the server waited for audio: this frame plays silence, nothing is skipped"
    tail = np.zeros(640, dtype=np.int16)
    tail[:160] = sent[640:]
    out = turn.audio_for(tail, 16_000, 640)
    assert np.array_equal(out[:160], sent[640:]) and not out[160:].any()


def test_a_frame_found_off_its_expected_position_is_located() -> None:
    sent = ramp(200, 16_000)
    turn = turn_with(sent, sent)
    # The first frame was never seen (lost): the second still maps to its own audio.
    out = turn.audio_for(sent[640:1280], 16_000, 640)
    assert np.array_equal(out, sent[640:1280])
    assert consumed_at(sent, 0, sent[640:1280]) is None
