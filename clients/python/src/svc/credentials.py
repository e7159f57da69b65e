"""Credentials for the real-time clients: an API key and a config_id.

Read from the environment (``SVC_API_KEY``, ``SVC_CONFIG_ID``) or an optional ``.env`` file; the
environment wins. A missing value raises :class:`MissingCredentialsError` whose message says what
is missing, where it looked and how to set it up. The key only ever travels in the ``X-API-Key``
header (never in a URL) and is hidden from ``repr``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

_LINE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")
_TRAILING_COMMENT = re.compile(r"\s+#.*$")


class CredentialsError(RuntimeError):
    """Credentials could not be resolved."""


class MissingCredentialsError(CredentialsError):
    """``SVC_API_KEY`` and/or ``SVC_CONFIG_ID`` are missing; ``missing`` names them."""

    def __init__(self, missing: list[str], message: str) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class Credentials:
    api_key: str = field(repr=False)
    config_id: str


def parse_dotenv(text: str) -> dict[str, str]:
    """Parses ``KEY=value`` lines: comments, ``export``, single and double quotes."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        value = m.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        else:
            value = _TRAILING_COMMENT.sub("", value)
        out[m.group(1)] = value
    return out


def load_env_file(path: str | os.PathLike[str] = ".env") -> dict[str, str]:
    """The variables of a ``.env`` file (empty when the file does not exist)."""
    p = Path(path)
    return parse_dotenv(p.read_text(encoding="utf-8")) if p.is_file() else {}


def resolve_credentials(
    *,
    env_file: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    load_env: bool = True,
) -> Credentials:
    """``SVC_API_KEY`` and ``SVC_CONFIG_ID`` from ``env`` (default ``os.environ``), else from ``env_file``
    (default ``.env`` in the working directory; skipped with ``load_env=False``)."""
    environ = os.environ if env is None else env
    file = Path(env_file if env_file is not None else ".env").resolve()
    from_file = load_env_file(file) if load_env else {}
    api_key = environ.get("SVC_API_KEY") or from_file.get("SVC_API_KEY")
    config_id = environ.get("SVC_CONFIG_ID") or from_file.get("SVC_CONFIG_ID")
    missing = [name for name, value in (("SVC_API_KEY", api_key), ("SVC_CONFIG_ID", config_id)) if not value]
    if missing:
        where = f"the environment or in {file}" if load_env else "the environment"
        raise MissingCredentialsError(
            missing,
            f"missing {' and '.join(missing)}: set {'them' if len(missing) > 1 else 'it'} in {where}. "
            "Setup: SVC_API_KEY is an API key of your organization (self-hosted: `npx svc keys create --org NAME "
            "--name LABEL`, or the key the server prints on its first start); SVC_CONFIG_ID is a model config id "
            "or a template alias such as svc/human-portrait. Example .env:\n"
            "  SVC_API_KEY=svc_...\n  SVC_CONFIG_ID=svc/human-portrait",
        )
    assert api_key and config_id
    return Credentials(api_key=api_key, config_id=config_id)
