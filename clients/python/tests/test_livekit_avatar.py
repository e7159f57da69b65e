"""The Python side of the LiveKit Agents avatar (svc.livekit_avatar) against OUR real server and a
LiveKit server: the fake of this repository (test/fakes/livekit-server.ts, alone in a process),
which checks every join's token with livekit-server-sdk's own verifier. So a session that joins
proves the token minted here is one LiveKit accepts (signature, grants, attributes, kind), and the
refusals are the service's own codes. ``livekit-agents`` cannot be installed here: the plugin
class around these calls is documented in docs/livekit-agents.md, not tested."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from svc import PUBLISH_ON_BEHALF, AvatarSessionError, AvatarSessions, avatar_token, livekit_token

from .conftest import REPO, TSX, RealServer


@dataclass(frozen=True)
class FakeLiveKit:
    url: str
    api_key: str
    api_secret: str


@pytest.fixture(scope="module")
def livekit() -> Iterator[FakeLiveKit]:
    """The fake LiveKit server in its own process group; it stops when its stdin closes."""
    proc = subprocess.Popen(
        [str(TSX), "test/fakes/livekit-server-host.ts"], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        words = line.split()
        if len(words) != 6 or words[0] != "url":
            raise RuntimeError(f"the fake LiveKit server did not start: {line!r}")
        yield FakeLiveKit(url=words[1], api_key=words[3], api_secret=words[5])
    finally:
        if proc.stdin:
            proc.stdin.close()
        if proc.stdout:
            proc.stdout.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def claims_of(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    def part(p: str) -> dict[str, Any]:
        value = json.loads(base64.urlsafe_b64decode(p + "=" * (-len(p) % 4)))
        assert isinstance(value, dict)
        return value

    header, payload, _ = token.split(".")
    return part(header), part(payload)


def test_avatar_token_claims_and_signature() -> None:
    secret = "a-secret-long-enough-for-hs256-signing"
    token = avatar_token("key-1", secret, room="room-1", agent_identity="agent-1", ttl_s=300)
    header, claims = claims_of(token)
    assert header == {"alg": "HS256", "typ": "JWT"}
    assert claims["iss"] == "key-1"
    assert claims["sub"] == "svc-avatar"
    assert claims["exp"] - claims["nbf"] == 300
    assert abs(claims["nbf"] - time.time()) < 5
    assert claims["video"] == {
        "roomJoin": True, "room": "room-1", "canPublish": True, "canSubscribe": True, "canPublishData": True,
    }
    assert claims["attributes"] == {PUBLISH_ON_BEHALF: "agent-1"}
    assert claims["kind"] == "agent"
    signed, signature = token.rsplit(".", 1)
    expected = hmac.new(secret.encode(), signed.encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)) == expected
    with pytest.raises(ValueError, match="on behalf of itself"):
        avatar_token("k", "s", room="r", agent_identity="svc-avatar")
    with pytest.raises(ValueError, match="key and secret"):
        livekit_token("", "s", identity="a", room="r")


async def test_a_session_joins_with_a_token_minted_here_and_ends_on_stop(
    real_server: RealServer, livekit: FakeLiveKit,
) -> None:
    sessions = AvatarSessions(real_server.http_url, real_server.api_key)
    token = avatar_token(livekit.api_key, livekit.api_secret, room="py-room", agent_identity="py-agent")
    session = await sessions.start(livekit.url, token)
    try:
        # 201 comes after the worker joined: the LiveKit server took the token.
        assert session.status == "active"
        assert (session.room, session.avatar_identity, session.agent_identity) == ("py-room", "svc-avatar", "py-agent")
        assert session.raw["metrics"]["join_ms"] is not None
        again = await sessions.get(session.avatar_session_id)
        assert again.avatar_session_id == session.avatar_session_id
        assert again.status == "active"
    finally:
        ended = await sessions.stop(session.avatar_session_id)
    assert ended.status == "ended"
    assert ended.end_reason == "deleted"


async def test_refusals_are_the_services_error_codes(real_server: RealServer, livekit: FakeLiveKit) -> None:
    sessions = AvatarSessions(real_server.http_url, real_server.api_key)
    good = avatar_token(livekit.api_key, livekit.api_secret, room="py-refusals", agent_identity="py-agent")

    async def refusal(call: Any) -> AvatarSessionError:
        with pytest.raises(AvatarSessionError) as caught:
            await call
        return caught.value

    wrong_key = await refusal(AvatarSessions(real_server.http_url, "sk_wrong").start(livekit.url, good))
    assert (wrong_key.status, wrong_key.code) == (401, "unauthorized")
    stale = avatar_token(livekit.api_key, livekit.api_secret, room="r", agent_identity="a", ttl_s=-60)
    expired = await refusal(sessions.start(livekit.url, stale))
    assert (expired.status, expired.code) == (400, "livekit_token_expired")
    # A plain participant token (no lk.publish_on_behalf): the agent's clients could not show the avatar as the agent.
    participant = livekit_token(livekit.api_key, livekit.api_secret, identity="svc-avatar", room="r")
    plain = await refusal(sessions.start(livekit.url, participant))
    assert (plain.status, plain.code) == (400, "livekit_token_invalid")
    # Signed with another secret: our checks pass, the LiveKit server refuses the join.
    other_secret = avatar_token(livekit.api_key, "another-secret-that-is-long-enough", room="r", agent_identity="a")
    forged = await refusal(sessions.start(livekit.url, other_secret))
    assert (forged.status, forged.code) == (502, "livekit_join_failed")
    unknown_face = await refusal(sessions.start(livekit.url, good, config_id="svc/no-such-face"))
    assert (unknown_face.status, unknown_face.code) == (404, "model_config_not_found")
    missing = await refusal(sessions.get("00000000-0000-4000-8000-000000000000"))
    assert (missing.status, missing.code) == (404, "avatar_session_not_found")
    unreachable = await refusal(AvatarSessions("http://127.0.0.1:9", real_server.api_key, timeout_s=5).get("x"))
    assert (unreachable.status, unreachable.code) == (0, "unreachable")
