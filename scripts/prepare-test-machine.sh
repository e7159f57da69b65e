#!/usr/bin/env bash
# `npm test`'s pretest: the system programs the test suite calls, checked on every run (a few ms).
#
#   chromium            the browser tests (widget, WebRTC rooms), launched as /usr/bin/chromium
#   ffmpeg, ffprobe     idle-video generation and the tests that decode its output
#   openssl             certificates made by the TLS tests (webhooks, wss:// relays, vendor fakes)
#   ps                  the bot host test reads its processes' nice value (procps)
#   gdb                 names the crash of a core dump left by a test run (scripts/core-backtrace.sh)
#   ip, iptables, nft   the network-namespace hosts of multi-host tests (iproute2, iptables, nftables)
#   turnserver          TURN relays in those tests (coturn)
#   wrk                 the REST flood beside live sessions (test/sessions/rest-flood.test.ts)
#   python3 + venv      the Python client's tests (scripts/test-python.sh makes the venv itself)
#   pocketsphinx-testdata  human read speech (librivox recordings) in the turn corpus
#                       (test/processors/turn-corpus.test.ts, bench/turns.ts)
#
# When something is missing and this user can install system packages (root, with apt-get), they
# are installed: one `apt-get update`, then one quiet `apt-get install`. Otherwise one line says
# what to install and the exit status is 1. Only bash builtins besides apt-get (the tests run it
# with PATH pointed at a scratch folder).
set -euo pipefail

# program:Debian package, in the order they are named when missing.
PROGRAMS=(chromium:chromium ffmpeg:ffmpeg ffprobe:ffmpeg openssl:openssl ps:procps gdb:gdb ip:iproute2 iptables:iptables nft:nftables turnserver:coturn wrk:wrk)

missing=()   # what to install (Debian package names, each once)
for entry in "${PROGRAMS[@]}"; do
  program="${entry%%:*}" package="${entry#*:}"
  command -v "$program" >/dev/null 2>&1 && continue
  [[ " ${missing[*]} " == *" $package "* ]] || missing+=("$package")
done
# Data, not a program: the human read speech of the turn corpus. (SVC_POCKETSPHINX_DATA: another
# place to look, for the pretest's own tests.)
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
for entry in "${PROGRAMS[@]}" python3:python3; do
  program="${entry%%:*}"
  if ! command -v "$program" >/dev/null 2>&1; then
    echo "pretest: $program is still not on PATH after apt-get install ${missing[*]}" >&2
    exit 1
  fi
done
