"""What :class:`svc.SvcSTVClient` gives out: its events, and the audio and video frames of
``output_stream()``."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal

from .protocol import FrameType, ImageFormat, Int16Array


class STVEvent(str, enum.Enum):
    SESSION_READY = "SESSION_READY"
    FIRST_FRAME = "FIRST_FRAME"
    WEBRTC_CONNECTED = "WEBRTC_CONNECTED"
    BOT_STARTED_SPEAKING = "BOT_STARTED_SPEAKING"
    BOT_STOPPED_SPEAKING = "BOT_STOPPED_SPEAKING"
    INTERRUPTED = "INTERRUPTED"
    ERROR = "ERROR"
    CLOSED = "CLOSED"


@dataclass(frozen=True, eq=False)
class STVAudioFrame:
    """40 ms of audio at ``sample_rate`` (mono int16): the sound of the frame ``frame_index``."""

    pcm: Int16Array = field(repr=False)
    sample_rate: int
    pts_ms: int
    frame_index: int
    kind: Literal["audio"] = "audio"


@dataclass(frozen=True, eq=False)
class STVVideoFrame:
    """The picture of frame ``frame_index``: ``rgb`` is width*height*3 bytes, or None when no
    decoder is installed or the image could not be decoded (``image`` then holds the JPEG)."""

    rgb: bytes | None = field(repr=False)
    width: int
    height: int
    pts_ms: int
    frame_index: int
    frame_type: FrameType
    image: bytes | None = field(default=None, repr=False)
    image_format: ImageFormat = "jpeg"
    kind: Literal["video"] = "video"


STVOutput = STVAudioFrame | STVVideoFrame
