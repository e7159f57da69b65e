"""JPEG to RGB decoding for video frames.

:func:`default_decoder` uses Pillow (``[stv]`` extra), else PyAV if installed, else none: video
frames then carry the JPEG bytes (``STVVideoFrame.image``) with ``rgb=None``. Any callable
``(jpeg: bytes, width: int, height: int) -> bytes | None`` can be passed as ``decoder=``; it runs
on a worker thread, so it never stalls the playback clock.
"""

from __future__ import annotations

import io
from collections.abc import Callable

Decoder = Callable[[bytes, int, int], "bytes | None"]


def pillow_decoder(jpeg: bytes, width: int, height: int) -> bytes | None:
    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as image:
        return image.convert("RGB").tobytes()


def pyav_decoder() -> Decoder:
    import av

    def decode(jpeg: bytes, width: int, height: int) -> bytes | None:
        codec = av.CodecContext.create("mjpeg", "r")
        for frame in codec.decode(av.Packet(jpeg)):
            return bytes(frame.to_ndarray(format="rgb24").tobytes())
        return None

    return decode


def default_decoder() -> Decoder | None:
    try:
        import PIL.Image  # noqa: F401

        return pillow_decoder
    except ImportError:
        pass
    try:
        return pyav_decoder()
    except ImportError:
        return None
