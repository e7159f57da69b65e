from __future__ import annotations

import logging

import pytest

from svc import SvcClient, WebRTCSettings, resolve_ws_url


def test_embedded_and_livekit_settings_become_the_webrtc_message() -> None:
    assert WebRTCSettings.embedded("r1", "t").to_message() == {
        "type": "webrtc", "settings": {"provider": "embedded", "room": "r1", "token": "t"},
    }
    assert WebRTCSettings.livekit("wss://lk.example", "jwt").to_message() == {
        "type": "webrtc", "settings": {"provider": "livekit", "url": "wss://lk.example", "token": "jwt"},
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        {"provider": "embedded", "room": "", "token": "t"},
        {"provider": "embedded", "token": "t"},
        {"provider": "embedded", "room": "r", "token": ""},
        {"provider": "embedded", "room": "r" * 257, "token": "t"},
        {"provider": "livekit", "url": "http://x", "token": "t"},
        {"provider": "livekit", "url": "wss://x?token=secret", "token": "t"},
        {"provider": "livekit", "url": "wss://x", "room": "r", "token": "t"},
        {"provider": "daily", "room": "r", "token": "t"},
    ],
)
def test_invalid_settings_are_refused(kwargs: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        WebRTCSettings(**kwargs)  # type: ignore[arg-type]


def test_the_token_never_shows_in_repr_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    settings = WebRTCSettings.embedded("room-1", "very-secret-token")
    caplog.set_level(logging.DEBUG)
    logging.getLogger("svc").info("settings %s %r", settings, settings)
    assert "very-secret-token" not in repr(settings) and "very-secret-token" not in str(settings)
    assert "very-secret-token" not in caplog.text and "room-1" in caplog.text
    client = SvcClient("svc_key_secret", "cfg", url="ws://127.0.0.1:1/realtime", webrtc=settings)
    assert "very-secret-token" not in client.connect_url() and "svc_key_secret" not in client.connect_url()
    assert "svc_key_secret" not in repr(client)


def test_endpoint_resolution() -> None:
    assert resolve_ws_url(env={}) == "ws://127.0.0.1:8080/realtime"
    assert resolve_ws_url(env={"SVC_WS_URL": "https://models.example.com"}) == "wss://models.example.com/realtime"
    assert resolve_ws_url(env={"SVC_REALTIME_URL": "ws://h:1/realtime"}) == "ws://h:1/realtime"
    assert resolve_ws_url("wss://a/b/realtime", env={"SVC_WS_URL": "ws://ignored"}) == "wss://a/b/realtime"
    assert resolve_ws_url(env={"SVC_WS_URL": "models.example.com"}) == "wss://models.example.com/realtime"
    for bad in (
        "ftp://x/realtime",
        "wss://x/realtime?api_key=k",
        "wss://x/realtime?access_token=k",
        "wss://x/realtime?X-API-Key=k",
        "not a url",
        "wss://",
    ):
        with pytest.raises(ValueError):
            resolve_ws_url(bad, env={})
    client = SvcClient("k", "svc/human-portrait", url="wss://m.example/realtime?region=eu")
    assert client.connect_url() == "wss://m.example/realtime?region=eu&config_id=svc%2Fhuman-portrait"


def test_plain_ws_to_a_remote_host_warns(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="svc")
    resolve_ws_url("ws://127.0.0.1:8080/realtime", env={})
    resolve_ws_url("wss://models.example.com/realtime", env={})
    assert caplog.records == []
    resolve_ws_url("ws://models.example.com/realtime", env={})
    assert len(caplog.records) == 1 and "wss://" in caplog.records[0].getMessage()
