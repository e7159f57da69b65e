#!/usr/bin/env bash
# `npm test`'s pretest: the system programs the test suite needs, checked on every run (a few ms).
#
#   chromium            the browser tests (widget, WebRTC rooms), launched as /usr/bin/chromium
#   ffmpeg              idle-video generation and the tests that decode its output
#   python3 + venv      the Python client's tests (scripts/test-python.sh makes the venv itself)
#   pocketsphinx-testdata  human read speech (librivox recordings) in the turn corpus
#                       (test/processors/turn-corpus.test.ts, bench/turns.ts)
#
# When something is missing and this user can install system packages (root, with apt-get), they
# are installed: one `apt-get update`, then one quiet `apt-get install`. Otherwise one line says
# what to install and the exit status is 1. Only bash builtins besides apt-get (the tests run it
# with PATH pointed at a scratch folder).
set -euo pipefail

missing=()   # what to install (Debian package names)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v ffmpeg >/dev/null 2>&1 || missing+=(ffmpeg)
# (SVC_POCKETSPHINX_DATA: another place to look, for the pretest's own tests.)
[ -f "${SVC_POCKETSPHINX_DATA:-/usr/share/pocketsphinx/test/data}/librivox/sense_and_sensibility_01_austen_64kb-0870.wav" ] || missing+=(pocketsphinx-testdata)
if ! command -v python3 >/dev/null 2>&1; then
  missing+=(python3 python3-venv)
elif ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "${EUID:-$(id -u)}" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "npm test needs ${missing[*]}: install them first (Debian/Ubuntu: sudo apt-get install ${missing[*]}), then run npm test again" >&2
  exit 1
fi

echo "pretest: installing ${missing[*]} (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
if ! out="$(apt-get update -qq 2>&1)"; then
  printf '%s\n' "$out" >&2
  echo "pretest: apt-get update failed; install ${missing[*]} yourself, then run npm test again" >&2
  exit 1
fi
if ! out="$(apt-get install -y -qq --no-install-recommends "${missing[@]}" 2>&1)"; then
  printf '%s\n' "$out" >&2
  echo "pretest: apt-get install ${missing[*]} failed (see above)" >&2
  exit 1
fi
for program in chromium ffmpeg python3; do
  if ! command -v "$program" >/dev/null 2>&1; then
    echo "pretest: $program is still not on PATH after apt-get install ${missing[*]}" >&2
    exit 1
  fi
done
