from __future__ import annotations

from pathlib import Path

import pytest

from svc import Credentials, MissingCredentialsError, parse_dotenv, resolve_credentials


def test_credentials_come_from_the_environment(tmp_path: Path) -> None:
    creds = resolve_credentials(env={"SVC_API_KEY": "k1", "SVC_CONFIG_ID": "svc/human-portrait"},
                                env_file=tmp_path / ".env")
    assert creds == Credentials(api_key="k1", config_id="svc/human-portrait")
    assert "k1" not in repr(creds)


def test_env_file_is_read_and_the_environment_wins(tmp_path: Path) -> None:
    file = tmp_path / ".env"
    file.write_text('# comment\nexport SVC_API_KEY="from-file"\nSVC_CONFIG_ID=cfg-file # trailing\n')
    assert resolve_credentials(env={}, env_file=file) == Credentials("from-file", "cfg-file")
    assert resolve_credentials(env={"SVC_CONFIG_ID": "cfg-env"}, env_file=file) == Credentials("from-file", "cfg-env")
    with pytest.raises(MissingCredentialsError):
        resolve_credentials(env={}, env_file=file, load_env=False)


def test_the_default_env_file_is_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("SVC_API_KEY=a\nSVC_CONFIG_ID=b\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SVC_API_KEY", raising=False)
    monkeypatch.delenv("SVC_CONFIG_ID", raising=False)
    assert resolve_credentials() == Credentials("a", "b")


def test_missing_values_raise_with_setup_instructions(tmp_path: Path) -> None:
    file = tmp_path / ".env"
    with pytest.raises(MissingCredentialsError) as one:
        resolve_credentials(env={"SVC_API_KEY": "k"}, env_file=file)
    assert one.value.missing == ["SVC_CONFIG_ID"]
    assert isinstance(one.value, RuntimeError)
    message = str(one.value)
    assert message.startswith(f"missing SVC_CONFIG_ID: set it in the environment or in {file}")
    assert "svc keys create" in message and "SVC_CONFIG_ID=" in message
    with pytest.raises(MissingCredentialsError) as both:
        resolve_credentials(env={}, env_file=file)
    assert both.value.missing == ["SVC_API_KEY", "SVC_CONFIG_ID"]


def test_dotenv_parsing() -> None:
    text = "A=1\n\n# x\nexport B='two words'\nC=\"q # not comment\"\nD=v # c\nnot a line\n"
    assert parse_dotenv(text) == {"A": "1", "B": "two words", "C": "q # not comment", "D": "v"}
