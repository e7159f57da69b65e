"""The binary codec against the golden bytes of test/realtime/protocol.test.ts (same vectors)."""

from __future__ import annotations

import re
from pathlib import Path

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

AUDIO_GOLDEN = "0101010005000000" + "0100feff"
SPEECH_GOLDEN = """
    02 01 02 03  02 01 00 00  50 28 00 00  03 00 00 00
    80 02 68 01  02 00 00 00  02 00 00 00
    ff d8
    05 00 ff ff"""
IDLE_RGB_GOLDEN = """
    02 01 00 00  07 00 00 00  18 01 00 00  00 00 00 00
    00 05 d0 02  00 00 00 00  01 00 01 00
    00 80"""
TS_TEST = Path(__file__).resolve().parents[3] / "test" / "realtime" / "protocol.test.ts"


def from_hex(h: str) -> bytes:
    return bytes.fromhex(re.sub(r"\s+", "", h))


def frame(**kw: object) -> FrameOut:
    base: dict[str, object] = dict(
        type="speech", final=False, index=1, pts_ms=40, turn_id=1, width=2, height=2, image_format="jpeg",
        image=bytes(4), audio=np.zeros(640, dtype=np.int16),
    )
    base.update(kw)
    return FrameOut(**base)  # type: ignore[arg-type]


def test_audio_in_encodes_to_the_documented_bytes() -> None:
    data = encode_audio_in(np.array([1, -2], dtype=np.int16), 5, True)
    assert data.hex() == AUDIO_GOLDEN
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


@pytest.mark.skipif(not TS_TEST.is_file(), reason="outside the svc repository")
def test_the_golden_vectors_are_those_of_the_typescript_tests() -> None:
    ts = TS_TEST.read_text(encoding="utf-8")
    assert f"'{AUDIO_GOLDEN[:16]}' + '{AUDIO_GOLDEN[16:]}'" in ts
    blocks = [re.sub(r"\s+", "", b) for b in re.findall(r"const golden = `([^`]*)`", ts)]
    assert re.sub(r"\s+", "", SPEECH_GOLDEN) in blocks
    assert re.sub(r"\s+", "", IDLE_RGB_GOLDEN) in blocks


def test_frames_round_trip() -> None:
    message = frame(type="fade-out", final=True, index=2**32 - 1, pts_ms=123, turn_id=9, image=b"abc",
                    audio=np.arange(-320, 320, dtype=np.int16))
    assert decode_frame_out(encode_frame_out(message)) == message


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (bytes([1, 1, 0]), "malformed_message"),
        (from_hex("0201000000000000"), "malformed_message"),
        (from_hex("0109000000000000"), "malformed_message"),
        (from_hex("010100000000000001"), "malformed_message"),
        (bytes([1]) * (REALTIME_LIMITS["maxMessageBytes"] + 1), "frame_too_large"),
        (encode_audio_in(np.zeros(16_001, dtype=np.int16), 0), "frame_too_large"),
    ],
)
def test_audio_decoding_refuses_malformed_and_oversized(data: bytes, code: str) -> None:
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
