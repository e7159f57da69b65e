"""SvcClient: the low-level real-time face-model client.

It owns the WebSocket and the wire protocol and nothing else: 16 kHz mono int16 PCM in, raw
protocol messages out (JSON control messages as dicts, and :class:`~svc.protocol.FrameOut`
frames carrying JPEG video and PCM audio). Same behaviour as ``transports/realtime/svc-client.ts``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.protocol import State

from .protocol import (
    MAX_AUDIO_CHUNK_SAMPLES,
    FrameOut,
    ProtocolError,
    ServerMessage,
    as_int16,
    decode_frame_out,
    encode_audio_in,
    encode_client_message,
    parse_server_message,
)
from .webrtc import WebRTCSettings

log = logging.getLogger("svc")

#: Self-hosted default (``npm start`` listens on 8080). A hosted service is the ``wss://`` form of
#: ``{models_ws_url}/realtime``: pass ``url=`` or set ``SVC_WS_URL``.
DEFAULT_WS_URL: Final = "ws://127.0.0.1:8080/realtime"
DEFAULT_CONNECT_TIMEOUT_S: Final = 15.0
#: A ``ping`` this often keeps an idle session under the server's idle timeout (never slower than a
#: third of the timeout the server announces).
DEFAULT_KEEP_ALIVE_S: Final = 30.0
#: Largest message accepted from the server: an RGB 1280x720 frame is 2.7 MB.
MAX_INCOMING_BYTES: Final = 16 * 1024 * 1024
#: Query parameter names the server refuses whatever their value (protocol/realtime.ts
#: URL_KEY_PARAMETER_NAMES): refused here first, so the key never leaves this process in a URL.
_KEY_PARAMS: Final = frozenset(
    {"api_key", "apikey", "key", "token", "access_token", "auth", "authorization", "x-api-key", "x_api_key", "bearer"}
)
_LOOPBACK: Final = frozenset({"localhost", "127.0.0.1", "::1"})

RealtimeMessage = ServerMessage | FrameOut
MessageListener = Callable[[RealtimeMessage], None]
CloseListener = Callable[[], None]


class SvcClientError(Exception):
    """``code`` is the server's error code (``auth_failed``, ``unknown_config``...) or one of the
    client's own: ``timeout``, ``transport_error``, ``closed``, ``not_connected``."""

    def __init__(self, code: str, message: str, close_code: int | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.close_code = close_code


def resolve_ws_url(url: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The /realtime endpoint: ``url``, else ``SVC_WS_URL``, else ``SVC_REALTIME_URL`` (the name the
    TypeScript client reads), else :data:`DEFAULT_WS_URL`. ``http(s)://`` becomes ``ws(s)://``, a host without
    a scheme ``wss://``, and a bare ``{models_ws_url}`` gets ``/realtime`` appended. A URL carrying a key or
    token is refused; plain ``ws://`` to a host other than loopback logs a warning."""
    environ = os.environ if env is None else env
    base = (url or environ.get("SVC_WS_URL") or environ.get("SVC_REALTIME_URL") or DEFAULT_WS_URL).strip()
    if "://" not in base:
        base = f"wss://{base}"  # a bare host: the wss:// form
    parts = urlsplit(base)
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme.lower(), parts.scheme.lower())
    if scheme not in ("ws", "wss") or not parts.hostname or any(c.isspace() for c in base):
        raise ValueError(f"not a WebSocket URL: {base!r} (expected wss://host/realtime)")
    if any(k.lower() in _KEY_PARAMS for k, _ in parse_qsl(parts.query)):
        raise ValueError("never put an API key or token in the URL; the client sends the key in the X-API-Key header")
    path = parts.path if parts.path not in ("", "/") else "/realtime"
    if scheme == "ws" and (parts.hostname or "") not in _LOOPBACK:
        log.warning("svc: %s is not encrypted (ws://): the API key would travel in clear; use wss://", parts.netloc)
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


class RealtimeTransport(Protocol):
    """What SvcSTVClient needs of a low-level client: SvcClient below, or a fake in tests."""

    @property
    def is_connected(self) -> bool: ...

    async def connect(self) -> ServerMessage: ...

    def subscribe(
        self, on_message: Callable[[RealtimeMessage], None], on_close: Callable[[], None] | None = None
    ) -> Callable[[], None]: ...

    async def send_audio(self, pcm16k: Any, end_of_turn: bool = False) -> None: ...

    async def start_turn(self) -> bool: ...

    async def cancel(self) -> bool: ...

    async def close(self) -> None: ...


class SvcClient:
    """The WebSocket and the /realtime protocol.

    Every server message, in order, is available from :meth:`messages` (or :meth:`receive`) and
    is handed to listeners added with :meth:`subscribe`. Pass ``queue_messages=False`` when only
    listeners are used, so unread messages do not pile up.
    """

    def __init__(
        self,
        api_key: str,
        config_id: str,
        *,
        url: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        keep_alive_interval: float = DEFAULT_KEEP_ALIVE_S,
        webrtc: WebRTCSettings | None = None,
        queue_messages: bool = True,
    ) -> None:
        if not api_key:
            raise ValueError("api_key is required (see svc.resolve_credentials)")
        if not config_id:
            raise ValueError("config_id is required (see svc.resolve_credentials)")
        self._api_key = api_key
        #: Cancels sent so far: audio being sent when one goes out stops (see send_audio).
        self._cancels = 0
        self.config_id = config_id
        self.url = resolve_ws_url(url)
        self.connect_timeout = connect_timeout
        self.keep_alive_interval = keep_alive_interval
        self.webrtc = webrtc
        self._queue: asyncio.Queue[RealtimeMessage | None] | None = asyncio.Queue() if queue_messages else None
        self._listeners: list[tuple[MessageListener, CloseListener | None]] = []
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._keep_alive: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[ServerMessage] | None = None
        self._sequence = 0
        self._closed = False
        #: close() was called: the connection ending is ours, not a loss.
        self._closing = False
        #: A fatal error (from the server or the transport) was already reported.
        self._fatal_reported = False
        #: The ``session_ready`` message while the session is live.
        self.session_ready: ServerMessage | None = None
        self.close_code: int | None = None
        self.close_reason: str | None = None

    def __repr__(self) -> str:  # the key never shows
        return f"SvcClient(url={self.url!r}, config_id={self.config_id!r}, connected={self.is_connected})"

    @property
    def is_connected(self) -> bool:
        return self._ws is not None and self._ws.state is State.OPEN and self.session_ready is not None

    def connect_url(self) -> str:
        parts = urlsplit(self.url)
        query = [(k, v) for k, v in parse_qsl(parts.query) if k != "config_id"] + [("config_id", self.config_id)]
        return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))

    async def connect(self) -> ServerMessage:
        """Opens the socket and returns ``session_ready``; raises :class:`SvcClientError` with the
        server's code (``auth_failed``, ``unknown_config``, ``server_busy``...) otherwise."""
        if self._ws is not None:
            raise SvcClientError("already_connected", "connect() was already called on this client")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        try:
            self._ws = await ws_connect(
                self.connect_url(),
                additional_headers={"X-API-Key": self._api_key},
                compression=None,  # JPEG and PCM do not compress; deflate would only cost CPU
                max_size=MAX_INCOMING_BYTES,
                open_timeout=self.connect_timeout,
                ping_interval=20,
                ping_timeout=20,
            )
        except InvalidStatus as err:
            status = err.response.status_code
            raise SvcClientError("transport_error", f"WebSocket upgrade refused: HTTP {status}") from err
        except (OSError, InvalidHandshake, InvalidURI, TimeoutError, asyncio.TimeoutError) as err:
            raise SvcClientError("transport_error", f"cannot connect to {self.url}: {err}") from err
        self._ready = loop.create_future()
        self._reader = asyncio.create_task(self._read(self._ws), name="svc-client-reader")
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            await self.close()
            raise SvcClientError("timeout", f"no session_ready within {self.connect_timeout} s") from None
        except BaseException:
            await self.close()  # refused (auth_failed, server_busy...): release the socket before raising
            raise

    # ---- receiving ------------------------------------------------------------------------------

    def subscribe(self, on_message: MessageListener, on_close: CloseListener | None = None) -> Callable[[], None]:
        """Calls ``on_message`` with every message from now on and ``on_close`` once the connection
        has closed; returns a function that removes them."""
        entry = (on_message, on_close)
        self._listeners.append(entry)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(entry)

        return unsubscribe

    async def receive(self) -> RealtimeMessage:
        """The next message; raises :class:`SvcClientError` (``closed``) once the connection is closed
        and every message was read."""
        if self._queue is None:
            raise SvcClientError("not_queued", "this client was created with queue_messages=False")
        item = await self._queue.get()
        if item is None:
            self._queue.put_nowait(None)  # later calls see the end too
            raise SvcClientError("closed", f"connection closed ({self.close_code} {self.close_reason or ''})".rstrip())
        return item

    async def messages(self) -> AsyncIterator[RealtimeMessage]:
        """Every server message in order (``session_ready`` included); ends when the connection closes."""
        while True:
            try:
                yield await self.receive()
            except SvcClientError as err:
                if err.code == "closed":
                    return
                raise

    def __aiter__(self) -> AsyncIterator[RealtimeMessage]:
        return self.messages()

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for data in ws:
                try:
                    message: RealtimeMessage = (
                        decode_frame_out(data) if isinstance(data, bytes) else parse_server_message(data)
                    )
                except ProtocolError as err:
                    self._dispatch(
                        {"type": "error", "code": "malformed_message", "message": f"undecodable server message: {err}",
                         "fatal": False}
                    )
                    continue
                if isinstance(message, dict):
                    await self._on_control(message)
                self._dispatch(message)
        except ConnectionClosed as err:
            # The socket went away under a live session (server killed, network lost, no close frame,
            # or an error close the server did not explain): say so before the close.
            code = ws.close_code
            if not self._closing and not self._fatal_reported and code not in (1000, 1001):
                how = "without a close frame" if code is None or code == 1006 else f"with code {code}"
                self._dispatch({
                    "type": "error", "code": "connection_lost",
                    "message": f"connection lost: the socket closed {how} ({err})", "fatal": True,
                })
        except Exception as err:  # a transport fault: report it like the TypeScript client does
            self._dispatch(
                {"type": "error", "code": "internal_error", "message": f"transport error: {err}", "fatal": True}
            )
        finally:
            self._finish(ws)

    async def _on_control(self, message: ServerMessage) -> None:
        kind = message["type"]
        if kind == "session_ready":
            self.session_ready = message
            limits = message.get("limits") or {}
            every = self.keep_alive_interval
            idle_ms = limits.get("idleTimeoutMs") if isinstance(limits, dict) else None
            if isinstance(idle_ms, (int, float)) and idle_ms > 0:
                every = min(every, idle_ms / 3000)
            if every > 0:
                self._keep_alive = asyncio.create_task(self._ping_every(every), name="svc-client-keepalive")
            if self.webrtc is not None:
                await self.send(self.webrtc.to_message())
            if self._ready and not self._ready.done():
                self._ready.set_result(message)
        elif kind == "error" and message.get("fatal"):
            if self._ready and not self._ready.done():
                self._ready.set_exception(SvcClientError(str(message.get("code")), str(message.get("message"))))

    def _dispatch(self, message: RealtimeMessage) -> None:
        if isinstance(message, dict) and message.get("type") == "error" and message.get("fatal"):
            self._fatal_reported = True
        if self._queue is not None:
            self._queue.put_nowait(message)
        for on_message, _ in list(self._listeners):
            try:
                on_message(message)
            except Exception:
                log.exception("SvcClient: a message listener failed")

    def _finish(self, ws: ClientConnection) -> None:
        self.close_code = ws.close_code
        self.close_reason = ws.close_reason
        if self._ready and not self._ready.done():
            self._ready.set_exception(
                SvcClientError("closed", f"connection closed ({ws.close_code} {ws.close_reason or ''})".rstrip(),
                               ws.close_code)
            )
        # Retrieve it so an unawaited failure is not reported as "never retrieved".
        if self._ready and self._ready.done() and not self._ready.cancelled():
            self._ready.exception()
        self.session_ready = None
        if self._keep_alive:
            self._keep_alive.cancel()
        self._closed = True
        if self._queue is not None:
            self._queue.put_nowait(None)
        for _, on_close in list(self._listeners):
            if on_close:
                try:
                    on_close()
                except Exception:
                    log.exception("SvcClient: a close listener failed")

    async def _ping_every(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            await self.send({"type": "ping"})

    # ---- sending --------------------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> bool:
        """Sends a control message; False when the socket is not open."""
        text = encode_client_message(message)
        ws = self._ws
        if ws is None or ws.state is not State.OPEN:
            return False
        try:
            await ws.send(text)
        except ConnectionClosed:
            return False
        return True

    async def send_audio(self, pcm16k: Any, end_of_turn: bool = False) -> None:
        """Sends 16 kHz mono int16 PCM (split into messages of at most 1 s); ``end_of_turn`` ends the
        turn after the last chunk. Raises :class:`SvcClientError` (``not_connected``) when closed."""
        samples = as_int16(pcm16k, "send_audio() PCM (16 kHz mono)")
        chunks = [samples[i : i + MAX_AUDIO_CHUNK_SAMPLES] for i in range(0, len(samples), MAX_AUDIO_CHUNK_SAMPLES)]
        if not chunks:
            chunks = [samples]
        messages = []
        for i, chunk in enumerate(chunks):
            messages.append(encode_audio_in(chunk, self._sequence, end_of_turn and i == len(chunks) - 1))
            self._sequence += 1
        ws = self._ws
        if ws is None:
            raise SvcClientError("not_connected", "send_audio() before connect()")
        if ws.state is not State.OPEN:
            why = f"({ws.close_code} {ws.close_reason or ''})".replace(" )", ")") if ws.close_code else ""
            raise SvcClientError("not_connected", f"send_audio() on a closed connection {why}".rstrip())
        # A cancel sent while these chunks go out (each send may wait on flow control) ends this
        # audio's turn: the rest is not sent, or it would open a new turn on the server by itself.
        cancels = self._cancels
        try:
            for message in messages:
                if self._cancels != cancels:
                    return
                await ws.send(message)
        except ConnectionClosed as err:
            raise SvcClientError("not_connected", f"connection closed: {err}") from err

    async def start_turn(self) -> bool:
        return await self.send({"type": "start_turn"})

    async def end_turn(self) -> bool:
        return await self.send({"type": "end_turn"})

    async def cancel(self) -> bool:
        self._cancels += 1
        return await self.send({"type": "cancel"})

    async def end(self) -> bool:
        """Asks the server to finish what was sent, then close."""
        return await self.send({"type": "end"})

    async def ping(self, t: float | None = None) -> bool:
        return await self.send({"type": "ping"} if t is None else {"type": "ping", "t": t})

    async def close(self) -> None:
        self._closing = True
        if self._ws is not None:
            await self._ws.close(1000, "client closed")
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    async def __aenter__(self) -> SvcClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
