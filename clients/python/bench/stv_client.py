"""SvcSTVClient figures against a running svc server (run by bench/python-client.ts, which starts
the server; usable alone too):

    SVC_API_KEY=svc_... SVC_CONFIG_ID=... SVC_WS_URL=ws://127.0.0.1:8080/realtime \\
        python clients/python/bench/stv_client.py [utterances]

Per utterance (2 s of 24 kHz "TTS", said at once, then a pause):
- first_frame: first TTS audio handed to the client (``say()``) -> first speech frame received from
  the server (raw, before the jitter buffer) and -> first speech frame played (``output_stream()``,
  after the 80 ms jitter buffer);
- queued frames when each utterance starts (received, not yet played: what the speech waits behind);
- playback clock: the spacing of the audio frames ``output_stream()`` yields, |interval - 40 ms|,
  over intervals without an underrun between them (an underrun stops the clock by design).

Prints one JSON line of raw figures on stdout; the TypeScript side makes the table.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from typing import Any

import numpy as np

from svc import FrameOut, STVAudioFrame, STVEvent, SvcSTVClient

RATE = 24_000
SPEECH_S = 2.0
PAUSE_S = 0.5


def speech(seconds: float) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    pcm = (np.sin(2 * np.pi * 180 * t) * 9000).astype(np.int16)
    pcm[pcm == 0] = 1
    return pcm


async def main(utterances: int) -> dict[str, Any]:
    client = SvcSTVClient(output_sample_rate=RATE)
    received_speech: list[float] = []
    played_speech: list[float] = []
    stopped = asyncio.Event()
    ticks: list[tuple[float, int]] = []
    last = {"received": -1, "played": -1}

    def on_frame(m: Any) -> None:
        if isinstance(m, FrameOut):
            last["received"] = m.index
            if m.is_speech:
                received_speech.append(time.perf_counter())

    client.client.subscribe(on_frame)
    client.add_listener(STVEvent.BOT_STARTED_SPEAKING, lambda p: played_speech.append(time.perf_counter()))
    client.add_listener(STVEvent.BOT_STOPPED_SPEAKING, lambda p: stopped.set())

    async def consume() -> None:
        async for item in client.output_stream():
            if isinstance(item, STVAudioFrame):
                ticks.append((time.perf_counter(), client.underruns))
                last["played"] = item.frame_index

    t0 = time.perf_counter()
    await client.connect()
    connect_ms = (time.perf_counter() - t0) * 1000
    consumer = asyncio.create_task(consume())
    await asyncio.sleep(1.0)  # the idle clock settles
    first_received: list[float] = []
    first_played: list[float] = []
    queued: list[int] = []
    pcm = speech(SPEECH_S)
    for _ in range(utterances):
        stopped.clear()
        n_received, n_played = len(received_speech), len(played_speech)
        queued.append(last["received"] - last["played"])  # frames received and not yet played
        sent_at = time.perf_counter()
        await client.say(pcm, RATE)
        await asyncio.wait_for(stopped.wait(), SPEECH_S + 30)
        first_received.append((received_speech[n_received] - sent_at) * 1000)
        first_played.append((played_speech[n_played] - sent_at) * 1000)
        await asyncio.sleep(PAUSE_S)
    await client.close()
    await consumer
    jitter = [abs((b - a) * 1000 - 40) for (a, ua), (b, ub) in itertools.pairwise(ticks) if ua == ub]
    return {
        "connect_ms": connect_ms,
        "first_frame_received_ms": first_received,
        "first_frame_played_ms": first_played,
        "jitter_ms": jitter,
        "queued_frames_at_say": queued,
        "ticks": len(ticks),
        "underruns": client.underruns,
        "dropped": client.dropped,
        "python": sys.version.split()[0],
    }


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    print(json.dumps(asyncio.run(main(n))))
