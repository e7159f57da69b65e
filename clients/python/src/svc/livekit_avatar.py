"""Our face as the avatar of a LiveKit Agents bot, from Python (docs/livekit-agents.md).

The agent side of LiveKit's avatar protocol needs two things from our service: an avatar token
(a LiveKit access token for the avatar participant, with ``lk.publish_on_behalf`` set to the
agent's identity) and the REST call that sends our worker into the room
(``POST /v1/avatar-sessions``). Both are here, with the standard library only, so that a
``livekit-agents`` plugin (the documented ``SvcAvatarSession``) is a thin class around them and
a bot without ``livekit-api`` installed can mint the token too.

- :func:`avatar_token`: the token, HS256-signed with the LiveKit API secret, as LiveKit's own
  ``AccessToken`` writes it (``iss`` the API key, ``sub`` the identity, ``nbf``/``exp``, a
  ``video`` grant for the room, ``attributes``, ``kind``).
- :class:`AvatarSessions`: start, read and end avatar sessions; every refusal is an
  :class:`AvatarSessionError` with the service's error code (``unauthorized``,
  ``livekit_token_invalid``, ``livekit_token_expired``, ``livekit_join_failed``, ...).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

#: The participant attribute that makes an agent's clients show the avatar's tracks as the agent's.
PUBLISH_ON_BEHALF = "lk.publish_on_behalf"
#: The avatar's identity in the room when none is given (what the service's docs use).
DEFAULT_AVATAR_IDENTITY = "svc-avatar"
#: The default face: the template alias of the human-portrait model.
DEFAULT_CONFIG_ID = "svc/human-portrait"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def livekit_token(
    api_key: str,
    api_secret: str,
    *,
    identity: str,
    room: str,
    ttl_s: int = 600,
    attributes: dict[str, str] | None = None,
    kind: str | None = None,
    name: str | None = None,
    now: float | None = None,
) -> str:
    """A LiveKit access token (JWT, HS256) for ``identity`` to join ``room`` and publish media and
    data, as ``livekit.api.AccessToken`` makes one. ``ttl_s`` may be negative (a token already
    expired, for tests of the refusal)."""
    if not api_key or not api_secret:
        raise ValueError("a LiveKit API key and secret are needed to sign the token")
    if not identity or not room:
        raise ValueError("the token needs an identity and a room")
    issued = int(now if now is not None else time.time())
    claims: dict[str, Any] = {
        "iss": api_key,
        "sub": identity,
        "nbf": issued,
        "exp": issued + ttl_s,
        "video": {"roomJoin": True, "room": room, "canPublish": True, "canSubscribe": True, "canPublishData": True},
    }
    if name:
        claims["name"] = name
    if attributes:
        claims["attributes"] = dict(attributes)
    if kind:
        claims["kind"] = kind
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    payload = _b64url(json.dumps(claims, separators=(",", ":")).encode())
    signature = hmac.new(api_secret.encode(), f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64url(signature)}"


def avatar_token(
    api_key: str,
    api_secret: str,
    *,
    room: str,
    agent_identity: str,
    identity: str = DEFAULT_AVATAR_IDENTITY,
    ttl_s: int = 600,
) -> str:
    """The token the agent mints for our avatar worker: ``identity`` in ``room``, kind ``agent``,
    publishing on behalf of ``agent_identity``."""
    if agent_identity == identity:
        raise ValueError("the avatar cannot publish on behalf of itself: give it an identity of its own")
    return livekit_token(
        api_key, api_secret, identity=identity, room=room, ttl_s=ttl_s,
        attributes={PUBLISH_ON_BEHALF: agent_identity}, kind="agent",
    )


class AvatarSessionError(Exception):
    """The service refused or failed a request: ``code`` is its error code, ``status`` the HTTP
    status (0 when the service could not be reached)."""

    def __init__(self, code: str, message: str, status: int, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.details = details or {}


@dataclass(frozen=True)
class AvatarSession:
    """An avatar session as the service shows it (the JSON is kept whole in ``raw``)."""

    avatar_session_id: str
    status: str
    room: str
    avatar_identity: str
    agent_identity: str
    end_reason: str | None
    raw: dict[str, Any]

    @staticmethod
    def from_json(body: dict[str, Any]) -> AvatarSession:
        return AvatarSession(
            avatar_session_id=str(body["avatar_session_id"]), status=str(body["status"]), room=str(body["room"]),
            avatar_identity=str(body["avatar_identity"]), agent_identity=str(body["agent_identity"]),
            end_reason=body.get("end_reason"), raw=body,
        )


class AvatarSessions:
    """The avatar sessions of one organization (its API key) on one service (``api_url``, e.g.
    ``https://svc.example.com``). The calls block in a worker thread, so they can be awaited from
    an agent's event loop."""

    def __init__(self, api_url: str, api_key: str, *, timeout_s: float = 30.0) -> None:
        if not api_key:
            raise ValueError("an svc API key is needed (SVC_API_KEY)")
        self._base = api_url.rstrip("/")
        self._key = api_key
        self._timeout = timeout_s

    async def start(
        self,
        livekit_url: str,
        livekit_token: str,
        *,
        config_id: str = DEFAULT_CONFIG_ID,
        max_duration_s: int | None = None,
    ) -> AvatarSession:
        """Sends the avatar into the room; returns once it has joined (status ``active``)."""
        body: dict[str, Any] = {"config_id": config_id, "livekit_url": livekit_url, "livekit_token": livekit_token}
        if max_duration_s is not None:
            body["max_duration_s"] = max_duration_s
        return AvatarSession.from_json(await self._call("POST", "/v1/avatar-sessions", body, expect=201))

    async def get(self, avatar_session_id: str) -> AvatarSession:
        path = f"/v1/avatar-sessions/{avatar_session_id}"
        return AvatarSession.from_json(await self._call("GET", path, None, expect=200))

    async def stop(self, avatar_session_id: str) -> AvatarSession:
        """Ends the session (the avatar leaves the room); returns its final state."""
        path = f"/v1/avatar-sessions/{avatar_session_id}"
        return AvatarSession.from_json(await self._call("DELETE", path, None, expect=200))

    async def _call(self, method: str, path: str, body: dict[str, Any] | None, *, expect: int) -> dict[str, Any]:
        return await asyncio.to_thread(self._call_blocking, method, path, body, expect)

    def _call_blocking(self, method: str, path: str, body: dict[str, Any] | None, expect: int) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"X-API-Key": self._key, "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self._base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                status, text = response.status, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as err:
            status, text = err.code, err.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError) as err:
            raise AvatarSessionError("unreachable", f"could not reach {self._base}: {err}", 0) from err
        try:
            parsed = json.loads(text) if text else {}
        except json.JSONDecodeError:
            parsed = {}
        if not isinstance(parsed, dict):
            parsed = {}
        if status != expect:
            raise AvatarSessionError(
                str(parsed.get("code") or f"http_{status}"), str(parsed.get("message") or text[:200]), status,
                parsed.get("details") if isinstance(parsed.get("details"), dict) else None,
            )
        return parsed
