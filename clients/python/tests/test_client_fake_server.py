"""SvcClient against an in-process WebSocket server on loopback that plays the /realtime server
and records what arrives (headers, path, every message)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Response

from svc import FrameOut, STVEvent, SvcClient, SvcClientError, SvcSTVClient, WebRTCSettings
from svc.protocol import decode_audio_in, encode_frame_out

from .helpers import make_frame

READY = {
    "type": "session_ready", "session_id": "s", "config_id": "c", "model_variant_id": "v", "width": 4, "height": 2,
    "fps": 25, "limits": {"idleTimeoutMs": 300_000}, "protocol_version": 1,
}


@dataclass
class FakeServer:
    url: str = ""
    path: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    received: list[str | bytes] = field(default_factory=list)
    got: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_for(self, predicate: Callable[[list[str | bytes]], bool], timeout: float = 5) -> None:
        async def loop() -> None:
            while not predicate(self.received):
                self.got.clear()
                await self.got.wait()

        await asyncio.wait_for(loop(), timeout)

    def texts(self) -> list[dict[str, Any]]:
        return [json.loads(m) for m in self.received if isinstance(m, str)]


Script = Callable[[ServerConnection, FakeServer], Awaitable[None]]


async def record(ws: ServerConnection, fake: FakeServer) -> None:
    async for m in ws:
        fake.received.append(m)
        fake.got.set()


async def ready_then_record(ws: ServerConnection, fake: FakeServer) -> None:
    await ws.send(json.dumps(READY))
    await record(ws, fake)


@pytest.fixture
async def start_server() -> AsyncIterator[Callable[..., Awaitable[FakeServer]]]:
    servers = []

    async def start(script: Script = ready_then_record, process_request: Any = None) -> FakeServer:
        fake = FakeServer()

        async def handler(ws: ServerConnection) -> None:
            fake.path = ws.request.path if ws.request else ""
            fake.headers = dict(ws.request.headers.raw_items()) if ws.request else {}
            await script(ws, fake)

        server = await serve(handler, "127.0.0.1", 0, process_request=process_request)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        fake.url = f"ws://127.0.0.1:{port}/realtime"
        return fake

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def test_the_key_goes_in_a_header_and_the_config_in_the_query(start_server: Any) -> None:
    fake = await start_server()
    client = SvcClient("svc_secret_key", "svc/human-portrait", url=fake.url)
    ready = await client.connect()
    assert ready == READY and client.is_connected and client.session_ready == READY
    assert fake.path == "/realtime?config_id=svc%2Fhuman-portrait"
    assert fake.headers.get("X-API-Key") == "svc_secret_key"
    assert "svc_secret_key" not in fake.path
    await client.close()
    assert not client.is_connected


async def test_audio_is_split_into_one_second_messages_with_sequence_numbers(start_server: Any) -> None:
    fake = await start_server()
    async with SvcClient("k", "c", url=fake.url) as client:
        pcm = np.arange(40_000, dtype=np.int64).astype(np.int16)
        await client.send_audio(pcm, end_of_turn=True)
        await client.send_audio(np.zeros(0, dtype=np.int16), end_of_turn=True)
        await client.send_audio(pcm[:10].tobytes())
        await fake.wait_for(lambda r: sum(isinstance(m, bytes) for m in r) == 5)
    audio = [decode_audio_in(m) for m in fake.received if isinstance(m, bytes)]
    assert [(len(a.pcm), a.sequence, a.end_of_turn) for a in audio] == [
        (16_000, 0, False), (16_000, 1, False), (8_000, 2, True), (0, 3, True), (10, 4, False),
    ]
    assert np.array_equal(np.concatenate([a.pcm for a in audio[:3]]), pcm)
    assert np.array_equal(audio[4].pcm, pcm[:10])


async def test_control_messages_and_the_message_stream(start_server: Any) -> None:
    async def script(ws: ServerConnection, fake: FakeServer) -> None:
        await ws.send(json.dumps(READY))
        await ws.send(encode_frame_out(make_frame(0, "idle", image=b"\xff\xd8", image_format="jpeg")))
        await ws.send(b"\x02\x01garbage")
        await ws.send(json.dumps({"type": "pong", "t": 5}))
        await record(ws, fake)

    fake = await start_server(script)
    client = SvcClient("k", "c", url=fake.url)
    await client.connect()
    assert await client.start_turn() and await client.end_turn() and await client.cancel()
    assert await client.ping(7) and await client.end()
    received = [await client.receive() for _ in range(4)]
    assert received[0] == READY
    assert isinstance(received[1], FrameOut) and received[1].image == b"\xff\xd8" and len(received[1].audio) == 640
    assert isinstance(received[2], dict) and received[2]["code"] == "malformed_message" and not received[2]["fatal"]
    assert received[3] == {"type": "pong", "t": 5}
    await fake.wait_for(lambda r: len(r) == 5)
    assert fake.texts() == [
        {"type": "start_turn"}, {"type": "end_turn"}, {"type": "cancel"}, {"type": "ping", "t": 7}, {"type": "end"},
    ]
    await client.close()
    assert [m async for m in client.messages()] == [], "the stream ends once the connection is closed"
    assert await client.send({"type": "cancel"}) is False
    with pytest.raises(SvcClientError) as err:
        await client.send_audio(np.zeros(10, dtype=np.int16))
    assert err.value.code == "not_connected"


async def test_webrtc_settings_are_sent_after_session_ready_never_in_the_url(start_server: Any) -> None:
    fake = await start_server()
    settings = WebRTCSettings.embedded("room-7", "publisher-token-xyz")
    client = SvcClient("k", "c", url=fake.url, webrtc=settings)
    await client.connect()
    await fake.wait_for(lambda r: len(r) >= 1)
    assert fake.texts()[0] == {
        "type": "webrtc", "settings": {"provider": "embedded", "room": "room-7", "token": "publisher-token-xyz"},
    }
    assert "publisher-token-xyz" not in fake.path and "publisher-token-xyz" not in json.dumps(fake.headers)
    await client.close()


async def test_keep_alive_pings_follow_the_announced_idle_timeout(start_server: Any) -> None:
    async def script(ws: ServerConnection, fake: FakeServer) -> None:
        await ws.send(json.dumps({**READY, "limits": {"idleTimeoutMs": 240}}))  # a ping every 80 ms
        await record(ws, fake)

    fake = await start_server(script)
    client = SvcClient("k", "c", url=fake.url, keep_alive_interval=30)
    await client.connect()
    await fake.wait_for(lambda r: sum(1 for m in r if m == '{"type":"ping"}') >= 3)
    await client.close()


async def test_a_fatal_server_error_fails_connect_with_its_code(start_server: Any) -> None:
    async def script(ws: ServerConnection, fake: FakeServer) -> None:
        await ws.send(json.dumps({"type": "error", "code": "auth_failed", "message": "invalid API key", "fatal": True}))
        await ws.close(4401, "auth_failed")

    fake = await start_server(script)
    client = SvcClient("k", "c", url=fake.url)
    with pytest.raises(SvcClientError) as err:
        await client.connect()
    assert err.value.code == "auth_failed" and "invalid API key" in str(err.value)
    await client.close()
    assert client.close_code == 4401


async def test_no_session_ready_times_out_and_a_refused_upgrade_is_a_transport_error(start_server: Any) -> None:
    fake = await start_server(record)
    client = SvcClient("k", "c", url=fake.url, connect_timeout=0.3)
    with pytest.raises(SvcClientError) as err:
        await client.connect()
    assert err.value.code == "timeout"

    def refuse(connection: Any, request: Any) -> Response:
        return connection.respond(404, "no such endpoint\n")

    refused = await start_server(process_request=refuse)
    with pytest.raises(SvcClientError) as err:
        await SvcClient("k", "c", url=refused.url).connect()
    assert err.value.code == "transport_error" and "404" in str(err.value)


async def test_subscribers_see_every_message_and_the_close(start_server: Any) -> None:
    async def script(ws: ServerConnection, fake: FakeServer) -> None:
        await ws.send(json.dumps(READY))
        for i in range(3):
            await ws.send(encode_frame_out(make_frame(i)))
        await ws.send(json.dumps({"type": "session_ended", "reason": "end"}))
        await ws.close(1000, "bye")

    fake = await start_server(script)
    seen: list[Any] = []
    closed = asyncio.Event()
    client = SvcClient("k", "c", url=fake.url, queue_messages=False)
    client.subscribe(seen.append, closed.set)
    await client.connect()
    await asyncio.wait_for(closed.wait(), 5)
    assert [m["type"] if isinstance(m, dict) else m.index for m in seen] == ["session_ready", 0, 1, 2, "session_ended"]
    assert client.close_code == 1000 and not client.is_connected


# ---- bad input and network loss ---------------------------------------------------------------


async def test_bad_audio_is_refused_with_clear_errors_before_anything_is_sent(start_server: Any) -> None:
    fake = await start_server()
    async with SvcClient("k", "c", url=fake.url) as client:
        with pytest.raises(TypeError, match="int16 samples, got a numpy array of float32"):
            await client.send_audio(np.zeros(160, dtype=np.float32))
        with pytest.raises(TypeError, match="int32"):
            await client.send_audio(np.zeros(160, dtype=np.int32))
        with pytest.raises(ValueError, match=r"must be mono, got an array of shape \(160, 2\)"):
            await client.send_audio(np.zeros((160, 2), dtype=np.int16))
        with pytest.raises(ValueError, match="int16 range"):
            await client.send_audio([0, 40_000])
        with pytest.raises(ValueError, match="whole 16-bit samples"):
            await client.send_audio(b"\x00\x01\x02")
        with pytest.raises(TypeError, match="got str"):
            await client.send_audio("not audio")
        await client.send_audio(np.zeros((4, 1), dtype=np.int16))  # one channel in a column is mono
        await fake.wait_for(lambda r: any(isinstance(m, bytes) for m in r))
    audio = [decode_audio_in(m) for m in fake.received if isinstance(m, bytes)]
    assert [(a.sequence, len(a.pcm)) for a in audio] == [(0, 4)], "nothing of the refused input went out"


async def test_send_audio_before_connect_and_after_close_raises_not_connected(start_server: Any) -> None:
    fake = await start_server()
    client = SvcClient("k", "c", url=fake.url)
    with pytest.raises(SvcClientError, match="before connect") as err:
        await client.send_audio(np.zeros(10, dtype=np.int16))
    assert err.value.code == "not_connected"
    await client.connect()
    await client.close()
    with pytest.raises(SvcClientError, match="closed connection") as err:
        await client.send_audio(np.zeros(10, dtype=np.int16))
    assert err.value.code == "not_connected"


async def drop_after_ready(ws: ServerConnection, fake: FakeServer) -> None:
    """The server vanishes mid-session: the TCP connection is cut without a close frame."""
    await ws.send(json.dumps(READY))
    await ws.send(encode_frame_out(make_frame(0)))
    fake.received.append(await ws.recv())  # the client's start_turn
    assert ws.transport is not None
    ws.transport.abort()


async def test_a_dropped_socket_is_an_error_then_the_end_of_the_stream(start_server: Any) -> None:
    fake = await start_server(drop_after_ready)
    closed = asyncio.Event()
    client = SvcClient("k", "c", url=fake.url)
    client.subscribe(lambda m: None, closed.set)
    await client.connect()
    await client.start_turn()
    messages = await asyncio.wait_for(_all(client), 10)  # a bound that only catches a hang
    assert isinstance(messages[1], FrameOut)
    error = messages[-1]
    assert isinstance(error, dict) and error["type"] == "error"
    assert error["code"] == "connection_lost" and error["fatal"] is True and "without a close frame" in error["message"]
    assert closed.is_set() and not client.is_connected and client.close_code == 1006
    with pytest.raises(SvcClientError) as err:
        await client.send_audio(np.zeros(10, dtype=np.int16))
    assert err.value.code == "not_connected"
    await client.close()


async def test_our_own_close_and_a_server_error_close_report_no_connection_lost(start_server: Any) -> None:
    fake = await start_server()
    client = SvcClient("k", "c", url=fake.url)
    await client.connect()
    await client.close()
    assert [m for m in await _all(client) if isinstance(m, dict) and m["type"] == "error"] == []

    async def idle_timeout(ws: ServerConnection, fake: FakeServer) -> None:
        await ws.send(json.dumps(READY))
        await ws.send(json.dumps({"type": "error", "code": "idle_timeout", "message": "idle", "fatal": True}))
        await ws.close(4408, "idle_timeout")

    fake = await start_server(idle_timeout)
    client = SvcClient("k", "c", url=fake.url)
    await client.connect()
    errors = [m for m in await asyncio.wait_for(_all(client), 10) if isinstance(m, dict) and m["type"] == "error"]
    assert [e["code"] for e in errors] == ["idle_timeout"], "the server's own explanation, once"
    assert client.close_code == 4408


async def _all(client: SvcClient) -> list[Any]:
    return [m async for m in client.messages()]


async def test_stv_client_network_loss_is_error_then_closed_and_later_input_raises(start_server: Any) -> None:
    fake = await start_server(drop_after_ready)
    events: list[tuple[str, dict[str, Any]]] = []
    stv = SvcSTVClient("k", "c", url=fake.url, decoder=None)
    for e in STVEvent:
        stv.add_listener(e, lambda p, e=e: events.append((e.value, p)))
    await stv.connect()

    async def pump() -> list[Any]:
        return [o async for o in stv.output_stream()]

    consumer = asyncio.create_task(pump())
    await stv.start_turn()
    await asyncio.wait_for(consumer, 10)  # output_stream() ends: a bound that only catches a hang
    names = [n for n, _ in events]
    assert names[0] == "SESSION_READY" and names[-2:] == ["ERROR", "CLOSED"]
    assert events[-2][1]["code"] == "connection_lost" and events[-2][1]["fatal"] is True
    assert not stv.is_connected
    for call in (lambda: stv.say(np.ones(160, dtype=np.int16), 16_000), stv.start_turn, stv.end_turn,
                 lambda: stv.send_tts_audio(np.ones(160, dtype=np.int16), 16_000)):
        with pytest.raises(SvcClientError, match="after the session closed") as err:
            await call()
        assert err.value.code == "closed"
    assert await stv.interrupt() is False
    await stv.close()
    assert names.count("CLOSED") == 1


async def test_stv_client_bad_input_raises_clear_errors_and_sends_nothing(start_server: Any) -> None:
    fake = await start_server()
    stv = SvcSTVClient("k", "c", url=fake.url, decoder=None)
    with pytest.raises(SvcClientError, match="before connect") as err:
        await stv.say(np.ones(160, dtype=np.int16), 16_000)
    assert err.value.code == "not_connected"
    await stv.connect()
    tone = np.ones(480, dtype=np.int16)
    cases: list[tuple[Any, type[Exception], str]] = [
        (lambda: stv.say(tone.astype(np.float32) / 2, 24_000), TypeError, "float32"),
        (lambda: stv.send_tts_audio(tone.astype(np.int32), 24_000), TypeError, "int32"),
        (lambda: stv.say(np.stack([tone, tone], axis=1), 24_000), ValueError, r"\(2 channels\) but num_channels=1"),
        (lambda: stv.say(np.ones((4, 2, 2), dtype=np.int16), 24_000, 2), ValueError, "shape"),
        (lambda: stv.send_tts_audio(tone[:-1], 24_000, 2), ValueError, "not whole frames of 2 channels"),
        (lambda: stv.say(tone, 0), ValueError, "sample_rate"),
        (lambda: stv.say(tone, 24_000.5), ValueError, "sample_rate"),
        (lambda: stv.say(tone, 24_000, 0), ValueError, "num_channels"),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind, match=message):
            await call()
    assert fake.received == [], "refused input sends nothing, not even a start_turn"
    await stv.say(np.stack([tone, tone * 3], axis=1), 24_000, 2)  # (frames, channels) is fine: averaged
    await fake.wait_for(lambda r: any(isinstance(m, bytes) and decode_audio_in(m).end_of_turn for m in r))
    sent = np.concatenate([decode_audio_in(m).pcm for m in fake.received if isinstance(m, bytes)])
    assert len(sent) == 320 and sent[100:200].min() >= 1, "480 frames at 24 kHz: 320 samples of the average (2)"
    await stv.close()
    with pytest.raises(SvcClientError, match="after the session closed"):
        await stv.send_tts_audio(tone, 24_000)
