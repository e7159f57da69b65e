"""Speech to video: play a WAV file through the avatar and save what comes back.

    SVC_API_KEY=svc_... SVC_CONFIG_ID=svc/human-portrait SVC_WS_URL=ws://127.0.0.1:8080/realtime \\
        python examples/say_wav.py speech.wav out/

Writes ``out/played.wav`` (the synchronized audio, 40 ms per avatar frame, at the input's rate)
and ``out/frame-NNNN.png`` for the speech frames (needs Pillow, the ``[stv]`` extra).
"""

from __future__ import annotations

import asyncio
import sys
import wave
from pathlib import Path

import numpy as np

from svc import STVAudioFrame, STVEvent, STVVideoFrame, SvcSTVClient


async def play(pcm: np.ndarray, rate: int, channels: int, out: Path) -> list[np.ndarray]:
    client = SvcSTVClient()  # SVC_API_KEY, SVC_CONFIG_ID (environment or .env), SVC_WS_URL
    done = asyncio.Event()

    @client.on(STVEvent.BOT_STOPPED_SPEAKING)
    def stopped(payload: dict[str, object]) -> None:
        done.set()

    @client.on(STVEvent.ERROR)
    async def error(payload: dict[str, object]) -> None:
        print(f"error: {payload['code']}: {payload['message']}", file=sys.stderr)

    played: list[np.ndarray] = []
    pictures = 0

    async def consume() -> None:
        nonlocal pictures
        async for item in client.output_stream():
            if isinstance(item, STVAudioFrame) and item.sample_rate == rate:
                played.append(item.pcm)
            elif isinstance(item, STVVideoFrame) and item.rgb is not None and item.frame_type != "idle":
                pictures += 1
                try:
                    from PIL import Image
                except ImportError:
                    continue
                image = Image.frombytes("RGB", (item.width, item.height), item.rgb)
                await asyncio.to_thread(image.save, out / f"frame-{item.frame_index:04d}.png")

    async with client:
        consumer = asyncio.create_task(consume())
        await client.say(pcm, rate, channels)
        await asyncio.wait_for(done.wait(), timeout=len(pcm) / channels / rate + 30)
    await consumer
    print(f"{len(played)} audio frames ({len(played) * 40} ms) and {pictures} speech pictures")
    return played


def main(wav_path: str, out_dir: str) -> None:
    with wave.open(wav_path, "rb") as wav:
        if wav.getsampwidth() != 2:
            raise SystemExit("the WAV file must be 16-bit PCM")
        rate, channels = wav.getframerate(), wav.getnchannels()
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    played = asyncio.run(play(pcm, rate, channels, out))
    with wave.open(str(out / "played.wav"), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(np.concatenate(played).astype("<i2").tobytes() if played else b"")
    print(f"written to {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
