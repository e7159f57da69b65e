"""Direct WebRTC settings: the service publishes the avatar into a room instead of returning frames.

Sent once, after ``session_ready``, as the ``webrtc`` message of the /realtime protocol
(``{"type": "webrtc", "settings": {...}}``): over the already authenticated socket, so the room
token never appears in a URL, and it is hidden from ``repr`` (and therefore from logs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

WebRTCProvider = Literal["embedded", "livekit"]
_WS_URL = re.compile(r"^wss?://", re.IGNORECASE)


@dataclass(frozen=True)
class WebRTCSettings:
    """``provider="embedded"``: one of the service's own rooms (``room`` + its publisher ``token``).
    ``provider="livekit"``: a LiveKit room at ``url`` (ws:// or wss://) with a ``token`` the room
    owner issued for the avatar participant."""

    provider: WebRTCProvider
    token: str = field(repr=False)
    room: str | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.token, str) or not 0 < len(self.token) <= 4096:
            raise ValueError("WebRTCSettings.token must be a non-empty string of at most 4096 characters")
        if self.provider == "embedded":
            if not isinstance(self.room, str) or not 0 < len(self.room) <= 256:
                raise ValueError("embedded WebRTCSettings need room: a non-empty string of at most 256 characters")
            if self.url is not None:
                raise ValueError("embedded WebRTCSettings take a room, not a url")
        elif self.provider == "livekit":
            if not isinstance(self.url, str) or not _WS_URL.match(self.url) or len(self.url) > 2048:
                raise ValueError("livekit WebRTCSettings need url: ws:// or wss://, at most 2048 characters")
            if self.room is not None:
                raise ValueError("livekit WebRTCSettings take a url, not a room (the token names the room)")
            if re.search(r"[?&](token|access_token)=", self.url):
                raise ValueError("keep the token out of the url: pass it as token=")
        else:
            raise ValueError(f"unknown WebRTC provider {self.provider!r}; expected 'embedded' or 'livekit'")

    @classmethod
    def embedded(cls, room: str, token: str) -> WebRTCSettings:
        return cls(provider="embedded", room=room, token=token)

    @classmethod
    def livekit(cls, url: str, token: str) -> WebRTCSettings:
        return cls(provider="livekit", url=url, token=token)

    def to_message(self) -> dict[str, Any]:
        """The /realtime ``webrtc`` message carrying these settings."""
        settings: dict[str, str] = {"provider": self.provider}
        if self.provider == "embedded":
            assert self.room is not None
            settings["room"] = self.room
        else:
            assert self.url is not None
            settings["url"] = self.url
        settings["token"] = self.token
        return {"type": "webrtc", "settings": settings}
