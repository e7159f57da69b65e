"""The binary codec against the golden bytes shared with the TypeScript tests: both read
protocol/fixtures/realtime-frames.json (test/realtime/protocol.test.ts reads the same file)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from svc.protocol import (
    REALTIME_LIMITS,
    FrameOut,
    ProtocolError,
    decode_audio_in,
    decode_frame_out,
    encode_audio_in,
    encode_client_message,
    encode_frame_out,
    parse_server_message,
)

FIXTURE = Path(__file__).resolve().parents[3] / "protocol" / "fixtures" / "realtime-frames.json"
if not FIXTURE.is_file():  # outside the svc repository (an sdist): no shared fixture to read
    pytest.skip(f"{FIXTURE} not found: the shared golden bytes live in the svc repository", allow_module_level=True)
VECTORS: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))


def from_hex(h: str) -> bytes:
    return bytes.fromhex(re.sub(r"\s+", "", h))


def vector(group: str, name: str) -> dict[str, Any]:
    found = [v for v in VECTORS[group] if v["name"] == name]
    assert len(found) == 1, f"{FIXTURE.name} has no single {group} vector named {name!r}"
    return found[0]


def frame_of(v: dict[str, Any]) -> FrameOut:
    return FrameOut(
        type=v["type"], final=v["final"], index=v["index"], pts_ms=v["pts_ms"], turn_id=v["turn_id"],
        width=v["width"], height=v["height"], image_format=v["image_format"],
        image=None if v["image"] is None else from_hex(v["image"]), audio=np.array(v["audio"], dtype=np.int16),
    )


AUDIO_GOLDEN = vector("audio_in", "two samples, sequence 5, end of turn")["hex"]
SPEECH_GOLDEN = vector("frame_out", "final speech frame with a 2-byte JPEG and two samples")["hex"]
IDLE_RGB_GOLDEN = vector("frame_out", "idle RGB frame without its image: flag bit 1 clear, length 0, format 1")["hex"]


def frame(**kw: object) -> FrameOut:
    base: dict[str, object] = dict(
        type="speech", final=False, index=1, pts_ms=40, turn_id=1, width=2, height=2, image_format="jpeg",
        image=bytes(4), audio=np.zeros(640, dtype=np.int16),
    )
    base.update(kw)
    return FrameOut(**base)  # type: ignore[arg-type]


def test_audio_in_encodes_to_the_documented_bytes() -> None:
    data = encode_audio_in(np.array([1, -2], dtype=np.int16), 5, True)
    assert data.hex() == from_hex(AUDIO_GOLDEN).hex()
    decoded = decode_audio_in(data)
    assert (decoded.sequence, decoded.end_of_turn, decoded.pcm.tolist()) == (5, True, [1, -2])


def test_frame_out_decodes_and_encodes_the_documented_bytes() -> None:
    message = frame(
        type="speech", final=True, index=258, pts_ms=10_320, turn_id=3, width=640, height=360,
        image=b"\xff\xd8", audio=np.array([5, -1], dtype=np.int16),
    )
    assert encode_frame_out(message).hex() == from_hex(SPEECH_GOLDEN).hex()
    decoded = decode_frame_out(from_hex(SPEECH_GOLDEN))
    assert decoded == message
    assert decoded.audio.dtype == np.int16 and decoded.is_speech


def test_idle_rgb_frame_without_its_image() -> None:
    message = frame(
        type="idle", final=False, index=7, pts_ms=280, turn_id=None, width=1280, height=720, image_format="rgb",
        image=None, audio=np.array([-32768], dtype=np.int16),
    )
    assert encode_frame_out(message).hex() == from_hex(IDLE_RGB_GOLDEN).hex()
    decoded = decode_frame_out(from_hex(IDLE_RGB_GOLDEN))
    assert decoded.image is None and decoded.turn_id is None and decoded.image_format == "rgb"
    assert decoded == message


@pytest.mark.parametrize("v", VECTORS["audio_in"], ids=lambda v: v["name"])
def test_every_shared_audio_vector_encodes_and_decodes(v: dict[str, Any]) -> None:
    data = encode_audio_in(np.array(v["pcm"], dtype=np.int16), v["sequence"], v["end_of_turn"])
    assert data.hex() == from_hex(v["hex"]).hex()
    decoded = decode_audio_in(from_hex(v["hex"]))
    assert (decoded.sequence, decoded.end_of_turn, decoded.pcm.tolist()) == (v["sequence"], v["end_of_turn"], v["pcm"])


@pytest.mark.parametrize("v", VECTORS["frame_out"], ids=lambda v: v["name"])
def test_every_shared_frame_vector_encodes_and_decodes(v: dict[str, Any]) -> None:
    assert encode_frame_out(frame_of(v)).hex() == from_hex(v["hex"]).hex()
    assert decode_frame_out(from_hex(v["hex"])) == frame_of(v)


@pytest.mark.parametrize("v", VECTORS["frame_out_decode_only"], ids=lambda v: v["name"])
def test_every_shared_decode_only_vector_decodes(v: dict[str, Any]) -> None:
    assert decode_frame_out(from_hex(v["hex"])) == frame_of(v)


@pytest.mark.parametrize("v", VECTORS["malformed_audio_in"], ids=lambda v: v["name"])
def test_every_shared_malformed_audio_vector_is_refused(v: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError) as err:
        decode_audio_in(from_hex(v["hex"]))
    assert err.value.code == v["code"]


@pytest.mark.parametrize("v", VECTORS["malformed_frame_out"], ids=lambda v: v["name"])
def test_every_shared_malformed_frame_vector_is_refused(v: dict[str, Any]) -> None:
    with pytest.raises(ProtocolError) as err:
        decode_frame_out(from_hex(v["hex"]))
    assert err.value.code == v["code"]


def test_the_shared_fixture_holds_vectors() -> None:
    groups = ("audio_in", "frame_out", "frame_out_decode_only", "malformed_audio_in", "malformed_frame_out")
    assert all(len(VECTORS[g]) >= 1 for g in groups) and len(VECTORS["frame_out"]) >= 2


def test_frames_round_trip() -> None:
    message = frame(type="fade-out", final=True, index=2**32 - 1, pts_ms=123, turn_id=9, image=b"abc",
                    audio=np.arange(-320, 320, dtype=np.int16))
    assert decode_frame_out(encode_frame_out(message)) == message


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (bytes([1]) * (REALTIME_LIMITS["maxMessageBytes"] + 1), "frame_too_large"),
        (encode_audio_in(np.zeros(16_001, dtype=np.int16), 0), "frame_too_large"),
    ],
)
def test_audio_decoding_refuses_oversized(data: bytes, code: str) -> None:
    with pytest.raises(ProtocolError) as err:
        decode_audio_in(data)
    assert err.value.code == code


def test_exactly_one_second_of_audio_decodes() -> None:
    assert len(decode_audio_in(encode_audio_in(np.zeros(16_000, dtype=np.int16), 0)).pcm) == 16_000


def test_frame_decoding_refuses_bad_lengths_formats_and_flags_and_ignores_reserved_bits() -> None:
    data = encode_frame_out(frame(audio=np.zeros(2, dtype=np.int16)))
    bad_format = bytearray(data)
    bad_format[26] = 2
    no_flag = bytearray(data)
    no_flag[3] = 0
    bad_type = bytearray(data)
    bad_type[2] = 4
    for bad in (data[:-1], bytes(bad_format), bytes(no_flag), bytes(bad_type), data[:27], b"\x01" + data[1:]):
        with pytest.raises(ProtocolError) as err:
            decode_frame_out(bad)
        assert err.value.code == "malformed_message"
    reserved = bytearray(data)
    reserved[3] = 0x82
    decoded = decode_frame_out(bytes(reserved))
    assert decoded.image == bytes(4) and decoded.final is False


def test_text_messages() -> None:
    assert encode_client_message({"type": "start_turn"}) == '{"type":"start_turn"}'
    with pytest.raises(ProtocolError):
        encode_client_message({"type": "explode"})
    assert parse_server_message('{"type":"pong","t":1}') == {"type": "pong", "t": 1}
    for bad in ("not json", "[]", "{}", '"x"'):
        with pytest.raises(ProtocolError):
            parse_server_message(bad)
