"""The Python clients against OUR real server (server/main.ts in a subprocess, see conftest.py):
the real /realtime endpoint, API keys, model configs and the offline face model."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from svc import (
    FrameOut,
    STVAudioFrame,
    STVEvent,
    STVVideoFrame,
    SvcClient,
    SvcClientError,
    SvcSTVClient,
    WebRTCSettings,
)

from .conftest import RealServer, kill_server
from .helpers import ramp

TIMEOUT_S = 30
#: server_busy means the machine is loaded right now (the server's admission gate also refuses new
#: sessions while its event loop is saturated): retry for a while, as a caller would.
BUSY_RETRY_S = 60


async def open_client(server: RealServer) -> tuple[SvcClient, dict[str, Any]]:
    deadline = time.monotonic() + BUSY_RETRY_S
    while True:
        client = SvcClient(server.api_key, server.config_id, url=server.ws_url)
        try:
            return client, await client.connect()
        except SvcClientError as err:
            if err.code != "server_busy" or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.5)


def tone(ms: int, rate: int = 16_000, hz: float = 220.0) -> np.ndarray:
    t = np.arange(ms * rate // 1000) / rate
    pcm = (np.sin(2 * np.pi * hz * t) * 8000).astype(np.int16)
    pcm[pcm == 0] = 1  # never 0: a played sample is speech, a 0 is silence
    return pcm


async def until(predicate: Callable[[], bool], what: str, timeout: float = TIMEOUT_S) -> None:
    async def poll() -> None:
        while not predicate():  # noqa: ASYNC110 (state changes come from several sources)
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(poll(), timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def voiced(audio: list[STVAudioFrame]) -> np.ndarray:
    pcm = np.concatenate([a.pcm for a in audio]) if audio else np.zeros(0, dtype=np.int16)
    return pcm[pcm != 0]


class Session:
    """An STV client with its played output, its events and the raw frames the server sent."""

    def __init__(self, server: RealServer, **options: Any) -> None:
        self.server = server
        self.options = options
        self.handler_errors: list[str] = []
        self.events: list[tuple[STVEvent, dict[str, Any]]] = []
        self.server_frames: dict[int, FrameOut] = {}
        self.played: list[Any] = []
        self.client = self._build()

    def _build(self) -> SvcSTVClient:
        self.events.clear()
        client = SvcSTVClient(
            self.server.api_key, self.server.config_id, url=self.server.ws_url,
            on_handler_error=lambda e, err: self.handler_errors.append(f"{e.value}: {err}"), **self.options,
        )
        for e in STVEvent:
            client.add_listener(e, lambda p, e=e: self.events.append((e, p)))
        client.client.subscribe(lambda m: isinstance(m, FrameOut) and self.server_frames.__setitem__(m.index, m))
        return client

    async def __aenter__(self) -> Session:
        deadline = time.monotonic() + BUSY_RETRY_S
        while True:
            try:
                self.ready = await self.client.connect()
                break
            except SvcClientError as err:
                if err.code != "server_busy" or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.5)
            self.client = self._build()
        self.pump = asyncio.create_task(self._pump())
        return self

    async def _pump(self) -> None:
        async for o in self.client.output_stream():
            self.played.append(o)

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()
        await asyncio.wait_for(self.pump, TIMEOUT_S)

    @property
    def audio(self) -> list[STVAudioFrame]:
        return [o for o in self.played if isinstance(o, STVAudioFrame)]

    def count(self, event: STVEvent) -> int:
        return sum(1 for e, _ in self.events if e == event)

    def payload(self, event: STVEvent) -> dict[str, Any]:
        return next(p for e, p in self.events if e == event)


async def test_bad_key_and_unknown_config_fail_with_the_server_codes(real_server: RealServer) -> None:
    with pytest.raises(SvcClientError) as err:
        await SvcClient("svc_wrong", real_server.config_id, url=real_server.ws_url).connect()
    assert err.value.code == "auth_failed"
    with pytest.raises(SvcClientError) as err:
        await SvcClient(real_server.api_key, "00000000-0000-4000-8000-000000000000", url=real_server.ws_url).connect()
    assert err.value.code == "unknown_config"


async def test_low_level_client_frames_and_speech_round_trip(real_server: RealServer) -> None:
    client, ready = await open_client(real_server)
    assert ready["fps"] == 25 and (ready["width"], ready["height"]) == (256, 192)
    frames: list[FrameOut] = []
    speech = tone(600)
    await client.start_turn()
    await client.send_audio(speech, end_of_turn=True)

    async def read() -> None:
        async for m in client.messages():
            if isinstance(m, FrameOut):
                frames.append(m)
                if m.final:
                    return

    await asyncio.wait_for(read(), TIMEOUT_S)
    assert await client.end() is True  # finish, then the server closes

    async def rest() -> list[Any]:
        return [m async for m in client.messages()]

    tail = await asyncio.wait_for(rest(), TIMEOUT_S)
    assert [m for m in tail if isinstance(m, dict)][-1]["type"] == "session_ended"
    assert client.close_code == 1000 and not client.is_connected
    await client.close()
    assert [f.index for f in frames] == list(range(len(frames))), "frames 0, 1, 2... without gaps"
    assert all(f.pts_ms == f.index * 40 and len(f.audio) == 640 for f in frames)
    assert all(f.image is None or f.image[:2] == b"\xff\xd8" for f in frames), "JPEG pictures"
    spoken = [f for f in frames if f.is_speech]
    assert spoken[0].type == "speech-start"
    assert np.array_equal(np.concatenate([f.audio for f in spoken])[: len(speech)], speech)
    assert any(f.type == "fade-out" for f in frames)


async def test_say_at_24k_comes_back_at_24k_in_order_with_rgb_video_and_events(real_server: RealServer) -> None:
    async with Session(real_server) as s:

        @s.client.on(STVEvent.BOT_STARTED_SPEAKING)
        def broken(payload: dict[str, Any]) -> None:
            raise RuntimeError("a broken handler")

        @s.client.on(STVEvent.BOT_STARTED_SPEAKING)
        async def broken_async(payload: dict[str, Any]) -> None:
            raise RuntimeError("a broken async handler")

        assert s.client.is_connected
        sent = ramp(800, 24_000)
        await s.client.say(sent, 24_000)
        await until(lambda: s.count(STVEvent.BOT_STOPPED_SPEAKING) == 1, "the end of the utterance")
        audio = s.audio
        video = [o for o in s.played if isinstance(o, STVVideoFrame)]
        after = [a for a in audio if a.sample_rate == 24_000]
        assert after and all(len(a.pcm) == 960 for a in after)
        assert np.array_equal(voiced(audio), sent), "the original 24 kHz audio, complete and in order"
        assert video and all(v.rgb is not None and len(v.rgb) == 256 * 192 * 3 for v in video)
        assert len(video) >= len(audio) - 2, "pictures accompany the audio"
        names = [e.value for e, _ in s.events]
        assert names[:4] == ["SESSION_READY", "FIRST_FRAME", "BOT_STARTED_SPEAKING", "BOT_STOPPED_SPEAKING"]
        # The first frame played is idle, or speech-start when the utterance was queued before any frame played.
        assert s.payload(STVEvent.FIRST_FRAME)["frame_type"] in ("idle", "speech-start")
        assert sorted(s.handler_errors) == [
            "BOT_STARTED_SPEAKING: a broken async handler", "BOT_STARTED_SPEAKING: a broken handler",
        ]
    assert s.count(STVEvent.CLOSED) == 1 and s.events[-1][0] == STVEvent.CLOSED
    assert not s.client.is_connected


async def test_streaming_tts_slower_than_real_time_plays_each_frame_with_its_own_audio(real_server: RealServer) -> None:
    async with Session(real_server, output_sample_rate=16_000) as s:
        await s.client.start_turn()
        for _ in range(4):
            await s.client.send_tts_audio(tone(150), 16_000)  # 150 ms of speech, then a gap: the server waits
            await asyncio.sleep(0.6)
        await s.client.end_turn()
        await until(lambda: s.count(STVEvent.BOT_STOPPED_SPEAKING) == 1, "the end of the utterance")
        waits = [f for f in s.server_frames.values() if f.type == "speech" and not f.audio.any()]
        assert len(waits) > 3, "the server waited for audio mid-turn"
        speech = [a for a in s.audio if s.server_frames[a.frame_index].is_speech]
        assert len(speech) > 10
        for a in speech:
            assert np.array_equal(a.pcm, s.server_frames[a.frame_index].audio), f"frame {a.frame_index}"


async def test_interrupt_cuts_the_speech_and_the_next_utterance_plays_whole(real_server: RealServer) -> None:
    async with Session(real_server, output_sample_rate=16_000) as s:
        assert await s.client.interrupt() is False, "nothing to interrupt yet"
        await s.client.say(tone(3000), 16_000)
        await until(lambda: s.count(STVEvent.BOT_STARTED_SPEAKING) == 1, "speech")
        cut = s.client.frames_played  # everything played from here on comes after the interrupt
        assert await s.client.interrupt() is True
        await until(lambda: s.count(STVEvent.INTERRUPTED) == 1, "the server's confirmation")
        assert s.payload(STVEvent.INTERRUPTED)["had_speech"] is True
        assert s.payload(STVEvent.BOT_STOPPED_SPEAKING) == {"interrupted": True}
        await until(lambda: len(s.audio) > cut + 10, "the clock to keep running after the interrupt")
        assert not voiced(s.audio[cut:]).any(), "nothing of the cancelled utterance plays after interrupt()"
        second = (-tone(600, hz=330)).astype(np.int16)
        await s.client.say(second, 16_000)
        await until(lambda: s.count(STVEvent.BOT_STOPPED_SPEAKING) == 2, "the second utterance")
        assert np.array_equal(voiced(s.audio[cut:]), second), "exactly the new utterance"
        assert await s.client.interrupt() is False, "nothing left to interrupt"


async def test_a_refused_webrtc_room_is_an_error_event_and_the_session_goes_on(real_server: RealServer) -> None:
    settings = WebRTCSettings.embedded("no-such-room", "not-a-token")
    async with Session(real_server, webrtc=settings) as s:
        await until(lambda: s.count(STVEvent.ERROR) == 1, "webrtc_failed")
        error = s.payload(STVEvent.ERROR)
        assert error["code"] == "webrtc_failed" and isinstance(error["message"], str) and error["fatal"] is False
        assert s.client.is_connected
        await until(lambda: s.count(STVEvent.FIRST_FRAME) == 1, "frames still flowing over the socket")


async def test_credentials_and_endpoint_from_the_environment(
    real_server: RealServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env
    monkeypatch.setenv("SVC_API_KEY", real_server.api_key)
    monkeypatch.setenv("SVC_CONFIG_ID", "svc/human-portrait")  # the template alias
    monkeypatch.setenv("SVC_WS_URL", real_server.http_url)  # {models_ws_url} form: ws:// and /realtime are derived
    monkeypatch.delenv("SVC_REALTIME_URL", raising=False)
    client = SvcSTVClient()
    assert client.client.url == real_server.ws_url  # type: ignore[attr-defined]
    deadline = time.monotonic() + BUSY_RETRY_S
    while True:
        try:
            ready = await client.connect()
            break
        except SvcClientError as err:
            if err.code != "server_busy" or time.monotonic() > deadline:
                raise
        await asyncio.sleep(0.5)
        client = SvcSTVClient()
    assert ready["model_variant_id"] == "svc/human-portrait/v1"
    await client.close()


def test_the_say_wav_example_runs(real_server: RealServer, tmp_path: Any) -> None:
    rate = 22_050
    speech = (np.sin(2 * np.pi * 200 * np.arange(rate // 2) / rate) * 9000).astype("<i2")
    stereo = np.stack([speech, speech], axis=1).reshape(-1)
    wav_path = tmp_path / "in.wav"
    with wave.open(str(wav_path), "wb") as wav:
        wav.setnchannels(2)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(stereo.tobytes())
    env = {
        **os.environ, "SVC_API_KEY": real_server.api_key, "SVC_CONFIG_ID": real_server.config_id,
        "SVC_WS_URL": real_server.ws_url,
    }
    example = Path(__file__).resolve().parents[1] / "examples" / "say_wav.py"
    for _ in range(int(BUSY_RETRY_S / 2)):
        result = subprocess.run(
            [sys.executable, str(example), str(wav_path), str(tmp_path / "out")],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )
        if "server_busy" not in result.stderr:
            break
        time.sleep(2)
    assert result.returncode == 0, result.stderr
    with wave.open(str(tmp_path / "out" / "played.wav"), "rb") as wav:
        assert wav.getframerate() == rate
        played = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    assert np.array_equal(played[played != 0], speech[speech != 0]), "the speech came back whole, in order"
    assert len(list((tmp_path / "out").glob("frame-*.png"))) >= 10


async def test_a_server_killed_mid_session_is_an_error_then_closed_never_a_hang(
    doomed_server: tuple[RealServer, subprocess.Popen[bytes]],
) -> None:
    server, proc = doomed_server
    low, _ = await open_client(server)
    async with Session(server, output_sample_rate=16_000) as s:
        await s.client.say(tone(5000), 16_000)
        await until(lambda: s.count(STVEvent.BOT_STARTED_SPEAKING) == 1, "speech")
        kill_server(proc)  # SIGKILL: no close frame, no goodbye
        # Bounds that only catch a hang: the loss is seen as soon as the kernel resets the sockets.
        await asyncio.wait_for(s.pump, TIMEOUT_S)
        names = [e.value for e, _ in s.events]
        assert names[-2:] == ["ERROR", "CLOSED"] and names.count("CLOSED") == 1
        error = s.events[-2][1]
        assert error["code"] == "connection_lost" and error["fatal"] is True, error
        assert not s.client.is_connected
        with pytest.raises(SvcClientError) as err:
            await s.client.say(tone(200), 16_000)
        assert err.value.code == "closed"
        assert await s.client.interrupt() is False
    rest = await asyncio.wait_for(_drain(low), TIMEOUT_S)
    assert isinstance(rest[-1], dict) and rest[-1]["code"] == "connection_lost", rest[-1:]
    assert not low.is_connected and low.close_code == 1006
    with pytest.raises(SvcClientError) as err:
        await low.send_audio(tone(40))
    assert err.value.code == "not_connected"
    await low.close()


async def _drain(client: SvcClient) -> list[Any]:
    return [m async for m in client.messages()]


def _probe(path: Path) -> dict[str, Any]:
    """Streams and duration of a media file: ffprobe when installed (a reader independent of the
    writer), else PyAV."""
    ffprobe = shutil.which("ffprobe")
    if ffprobe:
        out = subprocess.run(
            [ffprobe, "-v", "error", "-count_frames", "-show_streams", "-show_format", "-of", "json", str(path)],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout
        info = json.loads(out)
        return {
            "duration": float(info["format"]["duration"]),
            "streams": [
                {"type": s["codec_type"], "codec": s["codec_name"], "width": s.get("width"), "height": s.get("height"),
                 "sample_rate": int(s["sample_rate"]) if "sample_rate" in s else None, "channels": s.get("channels"),
                 "frames": int(s.get("nb_read_frames", 0)), "duration": float(s.get("duration", 0))}
                for s in info["streams"]
            ],
        }
    import av

    with av.open(str(path)) as c:
        streams = []
        for s in c.streams:
            frames = sum(1 for _ in c.decode(s)) if s.type == "video" else 0
            c.seek(0)
            streams.append({
                "type": s.type, "codec": s.codec_context.name, "width": getattr(s, "width", None),
                "height": getattr(s, "height", None), "sample_rate": getattr(s, "sample_rate", None) or None,
                "channels": getattr(s, "channels", None), "frames": frames,
                "duration": float(s.duration * s.time_base) if s.duration else 0.0,
            })
        return {"duration": float(c.duration / 1_000_000), "streams": streams}


def test_the_mp4_example_speaks_a_wav_into_a_video_with_sound(real_server: RealServer, tmp_path: Any) -> None:
    av = pytest.importorskip("av", reason="the MP4 example needs PyAV (the [test] extra installs it)")
    rate, seconds = 22_050, 1.2
    t = np.arange(int(rate * seconds)) / rate
    speech = (np.sin(2 * np.pi * 220 * t) * 9000).astype("<i2")
    wav_path = tmp_path / "speech.wav"
    with wave.open(str(wav_path), "wb") as wav:
        wav.setnchannels(2)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(np.stack([speech, speech], axis=1).reshape(-1).tobytes())
    env = {
        **os.environ, "SVC_API_KEY": real_server.api_key, "SVC_CONFIG_ID": real_server.config_id,
        "SVC_WS_URL": real_server.ws_url,
    }
    example = Path(__file__).resolve().parents[3] / "examples" / "python" / "speak_wav.py"
    mp4 = tmp_path / "out.mp4"
    for _ in range(int(BUSY_RETRY_S / 2)):
        result = subprocess.run(
            [sys.executable, str(example), str(wav_path), str(mp4)],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180,
        )
        if "server_busy" not in result.stderr:
            break
        time.sleep(2)
    assert result.returncode == 0, result.stderr
    info = _probe(mp4)
    video = [s for s in info["streams"] if s["type"] == "video"]
    audio = [s for s in info["streams"] if s["type"] == "audio"]
    assert len(video) == 1 and len(audio) == 1, info
    assert (video[0]["codec"], video[0]["width"], video[0]["height"]) == ("h264", 256, 192)
    assert (audio[0]["codec"], audio[0]["sample_rate"], audio[0]["channels"]) == ("aac", rate, 1)
    # The speech is all there, plus the idle frames around it (how many depends on the machine: a loose bound).
    assert seconds + 0.2 <= info["duration"] < seconds + 30, info
    frames = video[0]["frames"]
    assert abs(frames / 25 - info["duration"]) <= 0.12, f"{frames} frames at 25 fps for {info['duration']} s"
    assert f"{frames} frames" in result.stdout
    # The sound track carries the speech: decoded, as many loud samples as the WAV had (AAC is lossy).
    with av.open(str(mp4)) as c:
        decoded = np.concatenate([f.to_ndarray().reshape(-1) for f in c.decode(audio=0)])
    if decoded.dtype.kind == "f":
        decoded = decoded * 32768
    loud = int(np.sum(np.abs(decoded) > 3000))
    assert 0.8 * np.sum(np.abs(speech) > 3000) <= loud <= 1.2 * np.sum(np.abs(speech) > 3000) + rate * 0.05
