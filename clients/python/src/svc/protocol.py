"""The /realtime face-model wire protocol (v1): constants, message shapes and the binary codec.

The same protocol as ``docs/realtime-protocol.md`` and ``protocol/realtime.ts`` in the
svc repository (the golden bytes in ``tests/test_protocol.py`` are the ones of
``test/realtime/protocol.test.ts``).

Binary messages, all integers little-endian::

    audio in  (client -> server), 8-byte header then s16le PCM, 16 kHz mono:
      0 u8 kind = 0x01   1 u8 version = 1   2 u16 flags (bit 0: end of turn)   4 u32 sequence

    frame out (server -> client), 28-byte header, then the image, then the audio:
      0 u8 kind = 0x02   1 u8 version = 1   2 u8 frame type (0 idle, 1 speech-start, 2 speech, 3 fade-out)
      3 u8 flags (bit 0: final frame of a turn, bit 1: image present)
      4 u32 frame index  8 u32 pts (ms)     12 u32 turn id (0 = none)
      16 u16 width       18 u16 height      20 u32 image byte length
      24 u16 audio sample count             26 u8 image format (0 jpeg, 1 rgb)   27 u8 reserved
"""

from __future__ import annotations

import array
import json
import struct
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

PROTOCOL_VERSION: Final = 1
AUDIO_IN_KIND: Final = 0x01
FRAME_OUT_KIND: Final = 0x02
AUDIO_HEADER_BYTES: Final = 8
FRAME_HEADER_BYTES: Final = 28
SAMPLE_RATE: Final = 16_000
FPS: Final = 25
FRAME_MS: Final = 40
SAMPLES_PER_FRAME: Final = 640

_AUDIO_HEADER = struct.Struct("<BBHI")
_FRAME_HEADER = struct.Struct("<BBBBIIIHHIHBB")
assert _AUDIO_HEADER.size == AUDIO_HEADER_BYTES and _FRAME_HEADER.size == FRAME_HEADER_BYTES

#: The limits the reference server enforces; ``session_ready["limits"]`` carries a server's own values.
REALTIME_LIMITS: Final[dict[str, int]] = {
    "maxMessageBytes": 64 * 1024,
    "maxAudioChunkMs": 1_000,
    "maxQueuedAudioMs": 60_000,
    "maxControlMessagesPerSecond": 50,
    "idleTimeoutMs": 5 * 60_000,
    "audioSampleRate": 16_000,
}
#: The most samples one audio message may carry (1 s of 16 kHz).
MAX_AUDIO_CHUNK_SAMPLES: Final = SAMPLE_RATE * REALTIME_LIMITS["maxAudioChunkMs"] // 1000

FrameType = Literal["idle", "speech-start", "speech", "fade-out"]
FRAME_TYPES: Final[tuple[FrameType, ...]] = ("idle", "speech-start", "speech", "fade-out")
ImageFormat = Literal["jpeg", "rgb"]

#: WebSocket close codes the server uses when it closes because of an error.
CLOSE_CODES: Final[dict[str, int]] = {
    "auth_failed": 4401,
    "unknown_config": 4404,
    "invalid_configuration": 4422,
    "config_reference_missing": 4404,
    "config_reference_not_image": 4422,
    "config_no_face": 4422,
    "config_variant_unavailable": 4404,
    "server_busy": 4503,
    "idle_timeout": 4408,
    "slow_consumer": 4429,
    "internal_error": 1011,
}

#: A JSON message from the server, as parsed (``{"type": "session_ready", ...}``, ``{"type": "error", ...}``...).
ServerMessage = dict[str, Any]
Int16Array = npt.NDArray[np.int16]


class ProtocolError(ValueError):
    """A message that breaks the protocol; ``code`` is the protocol's error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def int16_samples(pcm: Any) -> Int16Array:
    """int16 samples of any shape from a numpy ``int16`` array, ``array('h')``, a sequence of ints in
    the int16 range, or little-endian s16 bytes. Anything else raises a clear ``TypeError`` (wrong
    dtype: float audio is not silently truncated, int32 is not silently wrapped) or ``ValueError``."""
    if isinstance(pcm, (bytes, bytearray, memoryview)):
        raw = bytes(pcm)
        if len(raw) % 2:
            raise ValueError(f"PCM bytes must be whole 16-bit samples, got {len(raw)} bytes")
        return np.frombuffer(raw, dtype="<i2").astype(np.int16)
    if isinstance(pcm, np.ndarray):
        if pcm.dtype != np.int16:
            hint = " (float audio in [-1, 1]: (x * 32767).astype(np.int16))" if pcm.dtype.kind == "f" else ""
            raise TypeError(f"PCM must be int16 samples, got a numpy array of {pcm.dtype}{hint}")
        return pcm
    if isinstance(pcm, array.array):
        if pcm.typecode != "h":
            raise TypeError(f"PCM must be int16 samples, got array('{pcm.typecode}'); use array('h')")
        return np.frombuffer(pcm, dtype=np.int16)
    if isinstance(pcm, str) or not hasattr(pcm, "__len__"):
        kind = type(pcm).__name__
        raise TypeError(f"PCM must be int16 samples (numpy int16 array, array('h'), bytes or ints), got {kind}")
    arr = np.asarray(pcm)
    if arr.size == 0:
        return np.zeros(arr.shape, dtype=np.int16)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"PCM must be int16 samples, got {arr.dtype} values")
    if int(arr.min()) < -32768 or int(arr.max()) > 32767:
        raise ValueError("PCM samples must be in the int16 range [-32768, 32767]")
    return arr.astype(np.int16)


def as_int16(pcm: Any, what: str = "PCM") -> Int16Array:
    """Mono int16 samples as a 1-D array (see :func:`int16_samples` for what is accepted). A
    multi-channel array (shape ``(n, 2)``...) raises ``ValueError``: mono is required here."""
    arr = int16_samples(pcm)
    if arr.ndim > 1 and not (arr.ndim == 2 and arr.shape[1] == 1):
        raise ValueError(
            f"{what} must be mono, got an array of shape {arr.shape}; average the channels first "
            "(SvcSTVClient.send_tts_audio(pcm, rate, num_channels=2) does that for interleaved audio)"
        )
    return arr.reshape(-1)


@dataclass(frozen=True, eq=False)
class FrameOut:
    """One 40 ms frame from the server: a picture (absent under congestion) and 640 samples of 16 kHz audio."""

    type: FrameType
    final: bool
    index: int
    pts_ms: int
    turn_id: int | None
    width: int
    height: int
    image_format: ImageFormat
    image: bytes | None
    audio: Int16Array = field(repr=False)

    @property
    def is_speech(self) -> bool:
        return self.type in ("speech", "speech-start")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FrameOut):
            return NotImplemented
        return (
            self.type == other.type
            and self.final == other.final
            and self.index == other.index
            and self.pts_ms == other.pts_ms
            and self.turn_id == other.turn_id
            and self.width == other.width
            and self.height == other.height
            and self.image_format == other.image_format
            and self.image == other.image
            and np.array_equal(self.audio, other.audio)
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class AudioIn:
    sequence: int
    end_of_turn: bool
    pcm: Int16Array

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AudioIn):
            return NotImplemented
        return (
            self.sequence == other.sequence
            and self.end_of_turn == other.end_of_turn
            and np.array_equal(self.pcm, other.pcm)
        )

    __hash__ = None  # type: ignore[assignment]


# ---- binary audio in ----------------------------------------------------------------------------


def encode_audio_in(pcm: Any, sequence: int, end_of_turn: bool = False) -> bytes:
    samples = as_int16(pcm, "audio-in PCM (16 kHz)")
    header = _AUDIO_HEADER.pack(AUDIO_IN_KIND, PROTOCOL_VERSION, 1 if end_of_turn else 0, sequence & 0xFFFFFFFF)
    return header + samples.astype("<i2", copy=False).tobytes()


def decode_audio_in(data: bytes) -> AudioIn:
    """The server's view of an audio message (used by tests and fakes); raises ProtocolError."""
    limit = REALTIME_LIMITS["maxMessageBytes"]
    if len(data) > limit:
        raise ProtocolError("frame_too_large", f"message of {len(data)} bytes exceeds {limit}")
    if len(data) < AUDIO_HEADER_BYTES:
        raise ProtocolError("malformed_message", f"audio message shorter than its {AUDIO_HEADER_BYTES}-byte header")
    kind, version, flags, sequence = _AUDIO_HEADER.unpack_from(data)
    if kind != AUDIO_IN_KIND:
        raise ProtocolError(
            "malformed_message", f"binary messages from clients must be audio (kind 0x01), got 0x{kind:02x}"
        )
    if version != PROTOCOL_VERSION:
        raise ProtocolError("malformed_message", f"unsupported protocol version {version}")
    payload = len(data) - AUDIO_HEADER_BYTES
    if payload % 2:
        raise ProtocolError("malformed_message", "audio payload must be whole 16-bit samples")
    if payload // 2 > MAX_AUDIO_CHUNK_SAMPLES:
        raise ProtocolError("frame_too_large", f"audio chunk longer than {REALTIME_LIMITS['maxAudioChunkMs']} ms")
    pcm = np.frombuffer(data, dtype="<i2", offset=AUDIO_HEADER_BYTES).astype(np.int16)
    return AudioIn(sequence=sequence, end_of_turn=bool(flags & 1), pcm=pcm)


# ---- binary frame out ---------------------------------------------------------------------------


def encode_frame_out(frame: FrameOut) -> bytes:
    """The server's side of the codec (used by tests and fakes)."""
    image = frame.image or b""
    audio = as_int16(frame.audio)
    flags = (1 if frame.final else 0) | (2 if frame.image is not None else 0)
    header = _FRAME_HEADER.pack(
        FRAME_OUT_KIND,
        PROTOCOL_VERSION,
        FRAME_TYPES.index(frame.type),
        flags,
        frame.index & 0xFFFFFFFF,
        round(frame.pts_ms) & 0xFFFFFFFF,
        (frame.turn_id or 0) & 0xFFFFFFFF,
        frame.width,
        frame.height,
        len(image),
        len(audio),
        1 if frame.image_format == "rgb" else 0,
        0,
    )
    return header + image + audio.astype("<i2", copy=False).tobytes()


def decode_frame_out(data: bytes) -> FrameOut:
    """Decodes a server frame; raises ProtocolError(``malformed_message``) on anything malformed."""
    if len(data) < FRAME_HEADER_BYTES:
        raise ProtocolError("malformed_message", "frame message shorter than its header")
    (kind, version, type_index, flags, index, pts, turn, width, height, image_bytes, samples, fmt, _reserved) = (
        _FRAME_HEADER.unpack_from(data)
    )
    if kind != FRAME_OUT_KIND:
        raise ProtocolError("malformed_message", "not a frame message")
    if version != PROTOCOL_VERSION:
        raise ProtocolError("malformed_message", f"unsupported protocol version {version}")
    if type_index >= len(FRAME_TYPES):
        raise ProtocolError("malformed_message", f"unknown frame type {type_index}")
    if fmt > 1:
        raise ProtocolError("malformed_message", f"unknown image format {fmt}")
    has_image = bool(flags & 2)
    if not has_image and image_bytes != 0:
        raise ProtocolError("malformed_message", "image bytes present but the image flag is clear")
    if FRAME_HEADER_BYTES + image_bytes + samples * 2 != len(data):
        raise ProtocolError("malformed_message", "frame message length does not match its header")
    audio_at = FRAME_HEADER_BYTES + image_bytes
    audio = np.frombuffer(data, dtype="<i2", count=samples, offset=audio_at).astype(np.int16)
    return FrameOut(
        type=FRAME_TYPES[type_index],
        final=bool(flags & 1),
        index=index,
        pts_ms=pts,
        turn_id=turn or None,
        width=width,
        height=height,
        image_format="rgb" if fmt == 1 else "jpeg",
        image=bytes(data[FRAME_HEADER_BYTES:audio_at]) if has_image else None,
        audio=audio,
    )


# ---- text messages ------------------------------------------------------------------------------

CLIENT_MESSAGE_TYPES: Final = frozenset({"webrtc", "start_turn", "end_turn", "cancel", "end", "ping"})


def encode_client_message(message: dict[str, Any]) -> str:
    if message.get("type") not in CLIENT_MESSAGE_TYPES:
        raise ProtocolError("malformed_message", f"unknown message type {message.get('type')!r}")
    return json.dumps(message, separators=(",", ":"))


def parse_server_message(text: str) -> ServerMessage:
    try:
        value = json.loads(text)
    except ValueError as err:
        raise ProtocolError("malformed_message", f"bad server message: {err}") from err
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ProtocolError("malformed_message", "bad server message")
    return value
