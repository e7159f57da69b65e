#!/usr/bin/env bash
# `npm run test:python`: the Python client library (clients/python) in its own virtual environment,
# clients/python/.venv (gitignored): created with python3 when missing, the package installed
# (editable, with its [stv,test] extras) from the configured package index whenever pyproject.toml
# changed, then `ruff check`, `mypy` (strict, on src and examples/python) and `pytest -q` (which also starts our real server, see
# clients/python/tests/conftest.py). Exit status: non-zero on any failure, including no tests.
# `scripts/test-python.sh --setup` stops after the venv and the install (used by bench/python-client.ts).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PKG="$ROOT/clients/python"
VENV="$PKG/.venv"
PYTHON="${PYTHON:-python3}"

fail() {
  echo "test:python: $*" >&2
  exit 1
}

command -v "$PYTHON" >/dev/null 2>&1 ||
  fail "python3 not found: install Python 3.10 or newer with venv (Debian/Ubuntu: apt-get install python3 python3-venv)"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
  fail "$("$PYTHON" -V 2>&1) is too old: install Python 3.10 or newer (Debian/Ubuntu: apt-get install python3 python3-venv)"
"$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1 ||
  fail "$PYTHON cannot create virtual environments: install the venv module (Debian/Ubuntu: apt-get install python3-venv)"

# Several checkouts' test runs may share this tree: one at a time sets the venv up and type-checks
# (the lock is on this script itself, so no lock file is left behind); the tests then run in parallel.
if command -v flock >/dev/null 2>&1; then
  exec 9<"${BASH_SOURCE[0]}"
  flock 9
fi

if ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV" >/dev/null ||
    fail "could not create $VENV: install the venv module (Debian/Ubuntu: apt-get install python3-venv)"
fi

# Reinstall only when the package's metadata (or the venv's Python) changed: the install is editable.
STAMP="$VENV/.svc-client-installed"
WANT="$("$VENV/bin/python" -c 'import hashlib, sys; print(sys.version.split()[0], hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$PKG/pyproject.toml")"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$WANT" ]; then
  echo "test:python: installing clients/python[stv,test] into $VENV" >&2
  # The public index may be unreachable on offline machines: fail over to the configured local index fast.
  # A registry that fails for a moment (a reset connection, a 5xx) is tried again: three attempts,
  # 5 s then 15 s apart, before the run fails for it.
  for attempt in 1 2 3; do
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_RETRIES="${PIP_RETRIES:-0}" PIP_TIMEOUT="${PIP_TIMEOUT:-15}" \
      "$VENV/bin/python" -m pip install --quiet -e "$PKG[stv,test]" && break
    [ "$attempt" -eq 3 ] && fail "pip could not install clients/python with its [stv,test] extras after 3 attempts (see pip's output above)"
    echo "test:python: pip install failed (attempt $attempt of 3); trying again in $((attempt == 1 ? 5 : 15)) s" >&2
    sleep $((attempt == 1 ? 5 : 15))
  done
  echo "$WANT" >"$STAMP"
fi

# `--setup`: only the venv and the install (what bench/python-client.ts needs), no checks or tests.
if [ "${1:-}" = "--setup" ]; then
  exit 0
fi

cd "$PKG"
# The examples (examples/python) are checked with the package's own settings.
EXAMPLES="$ROOT/examples/python"
"$VENV/bin/python" -m ruff check --quiet . "$EXAMPLES" || fail "ruff found problems in clients/python or examples/python (see above)"
"$VENV/bin/python" -m mypy --cache-dir "$VENV/.mypy_cache" >/dev/null ||
  { "$VENV/bin/python" -m mypy --cache-dir "$VENV/.mypy_cache" | tail -n 20; fail "mypy (strict, Python 3.10) found type errors in clients/python/src"; }
"$VENV/bin/python" -m mypy --cache-dir "$VENV/.mypy_cache" --strict --python-version 3.10 "$EXAMPLES" >/dev/null ||
  { "$VENV/bin/python" -m mypy --cache-dir "$VENV/.mypy_cache" --strict --python-version 3.10 "$EXAMPLES" | tail -n 20; fail "mypy (strict, Python 3.10) found type errors in examples/python"; }
if command -v flock >/dev/null 2>&1; then flock -u 9; fi
set +e
"$VENV/bin/python" -m pytest -q -p no:cacheprovider
code=$?
set -e
[ "$code" -eq 5 ] && fail "pytest ran no tests (exit 5) in clients/python/tests"
exit "$code"
