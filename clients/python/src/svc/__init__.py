"""svc: Python client for the svc real-time face-model WebSocket (``/realtime``).

- :class:`SvcClient`: the WebSocket and the wire protocol only (16 kHz mono int16 PCM in, raw
  protocol messages out).
- :class:`SvcSTVClient`: speech to video (TTS audio at any rate in; synchronized
  :class:`STVAudioFrame` / :class:`STVVideoFrame` out of ``output_stream()`` on a 25 fps clock).
- :func:`resolve_credentials`: ``SVC_API_KEY`` / ``SVC_CONFIG_ID`` from the environment or ``.env``.
- :class:`WebRTCSettings`: Direct WebRTC (the service publishes the avatar into a room).
- :class:`AvatarSessions` and :func:`avatar_token`: our face as the avatar of a LiveKit Agents bot
  (``POST /v1/avatar-sessions`` and the avatar's LiveKit token, standard library only).
"""

from .client import DEFAULT_WS_URL, RealtimeMessage, SvcClient, SvcClientError, resolve_ws_url
from .credentials import (
    Credentials,
    CredentialsError,
    MissingCredentialsError,
    load_env_file,
    parse_dotenv,
    resolve_credentials,
)
from .livekit_avatar import (
    PUBLISH_ON_BEHALF,
    AvatarSession,
    AvatarSessionError,
    AvatarSessions,
    avatar_token,
    livekit_token,
)
from .protocol import FrameOut, ProtocolError, ServerMessage
from .stv import SvcSTVClient
from .stv_frames import STVAudioFrame, STVEvent, STVOutput, STVVideoFrame
from .webrtc import WebRTCSettings

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_WS_URL",
    "PUBLISH_ON_BEHALF",
    "AvatarSession",
    "AvatarSessionError",
    "AvatarSessions",
    "Credentials",
    "CredentialsError",
    "FrameOut",
    "MissingCredentialsError",
    "ProtocolError",
    "RealtimeMessage",
    "STVAudioFrame",
    "STVEvent",
    "STVOutput",
    "STVVideoFrame",
    "ServerMessage",
    "SvcClient",
    "SvcClientError",
    "SvcSTVClient",
    "WebRTCSettings",
    "__version__",
    "avatar_token",
    "livekit_token",
    "load_env_file",
    "parse_dotenv",
    "resolve_credentials",
    "resolve_ws_url",
]
