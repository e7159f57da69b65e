"""The real svc server for the integration tests: the TypeScript server of this repository
(``server/main.ts``, as ``npm start`` runs it) started as a subprocess in its own process group, on
a free loopback port, with embedded PGlite in a temporary data directory and the offline face
model. Its first-start API key is read from its output. The whole process group is killed at the
end of the session."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TSX = REPO / "node_modules" / ".bin" / "tsx"
START_TIMEOUT_S = 120


@dataclass(frozen=True)
class RealServer:
    http_url: str
    ws_url: str
    api_key: str
    config_id: str
    """A small (256x192) human-portrait model config of the demo organization."""


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when pytest itself dies, even by SIGKILL, so a
    killed test run leaves no server behind. The fixture's own teardown is the normal path."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; make sure nothing else of the group lingers.
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


@contextlib.contextmanager
def start_real_server(label: str = "svc-pyclient-") -> Iterator[tuple[RealServer, subprocess.Popen[bytes]]]:
    """Our server in a subprocess (own process group, killed as a whole at the end) with a small
    human-portrait model config; yields it and its process (a test may kill it)."""
    if not (REPO / "server" / "main.ts").is_file():
        pytest.skip("not inside the svc repository: no server to test against")
    if not TSX.exists():
        pytest.fail(f"{TSX} is missing: run `npm ci` in {REPO}")
    data_dir = tempfile.mkdtemp(prefix=label)
    log_path = Path(data_dir) / "server.out"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PORT", "HOST", "SVC_DATA_DIR")}
    # Admission by count only: a busy test machine must not refuse the clients' sessions as
    # overloaded (the server's overload rule has its own tests in test/server).
    # LiveKit servers on loopback are allowed: the avatar-session tests run a fake one there (the
    # address policy refuses private and loopback addresses by default).
    env.update(PORT=str(port), HOST="127.0.0.1", SVC_DATA_DIR=str(Path(data_dir) / "data"), LOG_LEVEL="warn",
               SVC_CAPACITY_LOAD_CHECK="off", SVC_LIVEKIT_ALLOWED_RANGES="127.0.0.0/8")
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(TSX), "server/main.ts"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        key = None
        while key is None:
            text = log_path.read_text(errors="replace")
            m = re.search(r"First start: .*\n\s+(svc_\S+)", text)
            if m:
                key = m.group(1)
            elif proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the svc server did not start (exit {proc.poll()}):\n{text[-3000:]}")
            else:
                time.sleep(0.2)
        http_url = f"http://127.0.0.1:{port}"
        body = json.dumps({
            "title": "python client tests", "model_variant_id": "svc/human-portrait/v1",
            "model_configurations": {"width": 256, "height": 192},
        }).encode()
        request = urllib.request.Request(
            f"{http_url}/v1/model-configs", data=body, method="POST",
            headers={"X-API-Key": key, "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            config_id = json.load(response)["model_config_id"]
        ws_url = f"ws://127.0.0.1:{port}/realtime"
        yield RealServer(http_url=http_url, ws_url=ws_url, api_key=key, config_id=config_id), proc
    finally:
        _stop(proc)
        shutil.rmtree(data_dir, ignore_errors=True)


def kill_server(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the server's whole process group: it dies mid-session without closing anything."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
    proc.wait(10)


@pytest.fixture(scope="session")
def real_server() -> Iterator[RealServer]:
    with start_real_server() as (server, _):
        yield server


@pytest.fixture
def doomed_server() -> Iterator[tuple[RealServer, subprocess.Popen[bytes]]]:
    """A server of its own for a test that kills it."""
    with start_real_server("svc-pyclient-doomed-") as started:
        yield started
