"""Without the [stv] extra: a numpy resampler and no JPEG decoder (or PyAV), and the client still
plays the original audio in sync."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from svc import STVVideoFrame
from svc.decode import default_decoder
from svc.resample import LinearResampler, have_soxr, make_resampler

from .helpers import make_frame, ramp, speech_frames
from .stv_harness import Harness, voiced


@pytest.fixture
def without_stv_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("soxr", "PIL", "PIL.Image", "av"):
        monkeypatch.setitem(sys.modules, name, None)  # `import name` now raises ImportError


def test_without_the_extra_the_fallbacks_are_chosen(without_stv_extra: None) -> None:
    assert not have_soxr()
    assert isinstance(make_resampler(24_000, 16_000), LinearResampler)
    assert default_decoder() is None


async def test_without_the_extra_the_original_audio_still_plays_whole_and_pictures_pass_through(
    without_stv_extra: None,
) -> None:
    h = await Harness(decoder="auto").start()
    original = ramp(250, 44_100)
    await h.client.say(original, 44_100)
    await h.sync()
    assert abs(len(h.fake.sent) - 4000) <= 1, "a 16 kHz copy went to the server"
    jpeg = b"\xff\xd8 not decoded \xff\xd9"
    h.fake.push(make_frame(0, "idle", image=jpeg, image_format="jpeg"))
    h.fake.push(make_frame(1, "idle", image=jpeg, image_format="jpeg"))
    for f in speech_frames(h.fake.sent, 2, 1):
        h.fake.push(f)
    await h.ticks(15)
    assert np.array_equal(voiced(h.audio), original)
    pictures = [v for _, v in h.out if isinstance(v, STVVideoFrame) and v.image_format == "jpeg"]
    assert len(pictures) == 2 and all(v.rgb is None and v.image == jpeg for v in pictures)
    await h.close()
