"""Speak a WAV file through the avatar and write an MP4 with sound.

    SVC_API_KEY=svc_... SVC_CONFIG_ID=svc/human-portrait SVC_WS_URL=ws://127.0.0.1:8080/realtime \\
        python examples/python/speak_wav.py speech.wav out.mp4

The WAV (16-bit PCM, any rate, mono or stereo) goes to SvcSTVClient as TTS audio; what comes back,
one picture and 40 ms of the original audio per 25 fps tick, is encoded as it plays: H.264 video
(yuv420p) and AAC audio, both starting at the first frame. Encoding is PyAV (``pip install av``):
FFmpeg's libraries in a wheel, fed numpy arrays directly. See README.md beside this file.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import wave
from typing import Any

import numpy as np

from svc import STVAudioFrame, STVEvent, STVVideoFrame, SvcClientError, SvcSTVClient

try:
    import av
except ImportError:  # pragma: no cover - told to the user
    raise SystemExit("this example writes MP4 with PyAV: pip install av") from None

FPS = 25
#: Sample rates the AAC encoder takes; any other WAV rate is played (and encoded) at 48 kHz.
AAC_RATES = {8_000, 11_025, 12_000, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000, 64_000, 88_200, 96_000}
#: Idle frames kept after the speech, so the clip does not end on the last syllable.
TAIL_FRAMES = 5


def read_wav(path: str) -> tuple[np.ndarray, int, int]:
    with wave.open(path, "rb") as wav:
        if wav.getsampwidth() != 2 or wav.getcomptype() != "NONE":
            raise SystemExit(f"{path}: the WAV file must be 16-bit PCM")
        rate, channels = wav.getframerate(), wav.getnchannels()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").astype(np.int16)
    if not len(pcm):
        raise SystemExit(f"{path}: no audio")
    return pcm, rate, channels


class Mp4Writer:
    """H.264 + AAC, one video frame per audio frame (a tick without a picture repeats the last one)."""

    def __init__(self, path: str, width: int, height: int, rate: int) -> None:
        self.width, self.height = width - width % 2, height - height % 2  # yuv420p needs even sizes
        self.rate = rate
        self.container: Any = av.open(path, mode="w")
        self.video: Any = self.container.add_stream("libx264", rate=FPS)
        self.video.width, self.video.height, self.video.pix_fmt = self.width, self.height, "yuv420p"
        self.video.options = {"preset": "veryfast", "crf": "23"}
        self.audio: Any = self.container.add_stream("aac", rate=rate, layout="mono")
        self.last_picture: np.ndarray = np.zeros((self.height, self.width, 3), dtype=np.uint8)
        self.frames = 0
        self.samples = 0

    def picture(self, item: STVVideoFrame) -> None:
        """The picture of the next tick (kept for the ticks that come without one)."""
        if item.rgb is not None:
            rgb = np.frombuffer(item.rgb, dtype=np.uint8).reshape(item.height, item.width, 3)
            self.last_picture = np.ascontiguousarray(rgb[: self.height, : self.width])

    def tick(self, item: STVAudioFrame) -> None:
        """One 40 ms tick: the picture shown with it, then its sound."""
        frame = av.VideoFrame.from_ndarray(self.last_picture, format="rgb24")
        frame.pts = self.frames
        self.container.mux(self.video.encode(frame))
        self.frames += 1
        sound = av.AudioFrame.from_ndarray(item.pcm.reshape(1, -1), format="s16", layout="mono")
        sound.sample_rate, sound.pts = self.rate, self.samples
        self.container.mux(self.audio.encode(sound))
        self.samples += len(item.pcm)

    def close(self) -> None:
        self.container.mux(self.video.encode(None))
        self.container.mux(self.audio.encode(None))
        self.container.close()


async def speak(pcm: np.ndarray, rate: int, channels: int, out: str) -> Mp4Writer:
    play_rate = rate if rate in AAC_RATES else 48_000
    client = SvcSTVClient(output_sample_rate=play_rate)  # SVC_API_KEY, SVC_CONFIG_ID, SVC_WS_URL (or .env)
    spoken = asyncio.Event()
    failed: list[str] = []

    @client.on(STVEvent.BOT_STOPPED_SPEAKING)
    def stopped(payload: dict[str, Any]) -> None:
        spoken.set()

    @client.on(STVEvent.ERROR)
    def error(payload: dict[str, Any]) -> None:
        print(f"error: {payload['code']}: {payload['message']}", file=sys.stderr)
        if payload.get("fatal"):
            failed.append(str(payload["code"]))

    ready = await client.connect()
    writer = Mp4Writer(out, int(ready["width"]), int(ready["height"]), play_rate)

    async def record() -> None:
        # Each tick yields its audio, then its picture (when one arrived): a tick is written once the
        # next item shows whether it had a picture.
        pending: STVAudioFrame | None = None
        tail = 0
        async for item in client.output_stream():
            if isinstance(item, STVVideoFrame):
                if pending is not None and item.frame_index == pending.frame_index:
                    writer.picture(item)
                continue
            if pending is not None:
                await asyncio.to_thread(writer.tick, pending)  # encoding off the event loop, in order
                pending = None
                if spoken.is_set():
                    tail += 1
                    if tail >= TAIL_FRAMES:
                        return
            if item.sample_rate == play_rate:  # always, with output_sample_rate set
                pending = item
        if pending is not None:
            await asyncio.to_thread(writer.tick, pending)

    try:
        recorder = asyncio.create_task(record())
        await client.say(pcm, rate, channels)
        await asyncio.wait_for(recorder, timeout=len(pcm) / channels / rate + 30)
    finally:
        await client.close()
        await asyncio.to_thread(writer.close)
    if failed or not spoken.is_set():
        raise SystemExit(f"the session ended before the speech did ({', '.join(failed) or 'closed'})")
    return writer


def main() -> None:
    parser = argparse.ArgumentParser(description="Speak a WAV file through the avatar and write an MP4 with sound.")
    parser.add_argument("wav", help="16-bit PCM WAV, any rate, mono or stereo")
    parser.add_argument("mp4", help="where to write the video")
    args = parser.parse_args()
    pcm, rate, channels = read_wav(args.wav)
    try:
        writer = asyncio.run(speak(pcm, rate, channels, args.mp4))
    except SvcClientError as err:
        raise SystemExit(f"cannot talk to the service: {err}") from None
    print(f"{args.mp4}: {writer.frames} frames ({writer.frames / FPS:.2f} s) of {writer.width}x{writer.height} "
          f"video at {FPS} fps with {writer.rate} Hz audio")


if __name__ == "__main__":
    main()
