/**
 * The fake LiveKit server handles media before bulk data (test/fakes/livekit-media.ts,
 * `prioritizeMedia`): a DTLS datagram of werift's UDP sockets (content types 20-63: the handshake
 * and the SCTP of data channels) that is bulk (`bulkDatagramBytes` or more), every DTLS datagram
 * of a connection that just sent bulk data, and every later DTLS datagram of a connection while
 * some wait, go into one queue worked through one datagram per
 * turn of the event loop; STUN, SRTP/SRTCP and a quiet connection's small DTLS datagrams are
 * handled as they come. These tests call the transport's receiver as its socket does (`onData`),
 * so the order is the wrapper's alone, not the kernel's. Serial: the queue is the process's.
 */
import test from 'ava';
import { UdpTransport } from 'werift';
import { LIVEKIT_MEDIA_FAKE_DEFAULTS, prioritizeMedia } from '../fakes/livekit-media.ts';
import { until } from '../../testing/until.ts';

const ADDR: [string, number] = ['127.0.0.1', 9];
const STUN = 0x00;
const DTLS_APPLICATION_DATA = 23;
const DTLS_HANDSHAKE = 22;
const SRTP = 0x80;
/** A datagram whose first byte is `first` and second `id`, of `bytes` bytes. */
const datagram = (first: number, id: number, bytes = 2) => {
  const data = Buffer.alloc(bytes);
  data[0] = first;
  data[1] = id;
  return data;
};
const BULK = LIVEKIT_MEDIA_FAKE_DEFAULTS.bulkDatagramBytes;
const name = (data: Buffer) => `${data[0] === SRTP ? 'srtp' : data[0] === STUN ? 'stun' : data.length >= BULK ? 'bulk' : 'dtls'}${data[1]}`;

/**
 * Runs `check` with a werift UDP transport (media first installed) whose receiver notes each
 * datagram it is handed by name in `seen` (a test may set its own), and closes it after.
 */
async function withTransport(check: (udp: UdpTransport, seen: string[]) => Promise<void> | void): Promise<void> {
  prioritizeMedia();
  const udp = await UdpTransport.init('udp4', { interfaceAddresses: { udp4: '127.0.0.1' } });
  try {
    const seen: string[] = [];
    udp.onData = (data) => void seen.push(name(data));
    await check(udp, seen);
  } finally {
    await udp.close();
  }
}

test.serial('a quiet connection\'s small DTLS datagrams are handled as they come', async (t) => {
  await withTransport(async (udp, seen) => {
    udp.onData(datagram(DTLS_APPLICATION_DATA, 1), ADDR);
    udp.onData(datagram(SRTP, 2), ADDR);
    udp.onData(datagram(DTLS_HANDSHAKE, 3, BULK - 1), ADDR);
    t.deepEqual(seen, ['dtls1', 'srtp2', 'dtls3']);
  });
});

test.serial('media and STUN overtake bulk data; the connection\'s later DTLS waits behind it, in order', async (t) => {
  await withTransport(async (udp, seen) => {
    udp.onData(datagram(DTLS_APPLICATION_DATA, 1, BULK), ADDR);
    udp.onData(datagram(DTLS_APPLICATION_DATA, 2), ADDR); // small, but its connection has data waiting
    udp.onData(datagram(SRTP, 3), ADDR);
    udp.onData(datagram(STUN, 4), ADDR);
    udp.onData(datagram(DTLS_HANDSHAKE, 5), ADDR);
    t.deepEqual(seen, ['srtp3', 'stun4'], 'the DTLS datagrams wait');
    await until(() => seen.length === 5, { timeoutMs: 5_000, intervalMs: 1, what: 'the DTLS datagrams' });
    t.deepEqual(seen, ['srtp3', 'stun4', 'bulk1', 'dtls2', 'dtls5']);
    // Nothing waits any more: a small datagram is handled at once again.
    udp.onData(datagram(DTLS_APPLICATION_DATA, 6), ADDR);
    t.is(seen.at(-1), 'dtls6');
  });
});

test.serial('a connection that just sent bulk data has the acknowledgements that come back wait too', async (t) => {
  await withTransport(async (udp, seen) => {
    // A full SCTP DATA packet out (to the discard port of this machine).
    await udp.send(datagram(DTLS_APPLICATION_DATA, 0, BULK), ADDR);
    udp.onData(datagram(DTLS_APPLICATION_DATA, 1), ADDR); // a SACK for it
    udp.onData(datagram(SRTP, 2), ADDR);
    t.deepEqual(seen, ['srtp2']);
    await until(() => seen.length === 2, { timeoutMs: 5_000, intervalMs: 1, what: 'the SACK' });
    t.deepEqual(seen, ['srtp2', 'dtls1']);
  });
});

test.serial('bulk data is worked through one datagram per turn of the event loop: media between them, and the microtasks each one queued before the next', async (t) => {
  await withTransport(async (udp, seen) => {
    udp.onData = (data) => {
      if (data[0] === SRTP) return void seen.push('srtp');
      seen.push(name(data));
      // What werift does at a DTLS handshake's end: the SCTP association starts in a microtask,
      // and must have started before the next datagram (the peer's SCTP INIT) is handled.
      void Promise.resolve().then(() => Promise.resolve()).then(() => seen.push(`after${data[1]}`));
    };
    const count = 20;
    for (let i = 0; i < count; i++) udp.onData(datagram(DTLS_APPLICATION_DATA, i, BULK), ADDR);
    // A media packet read by the socket while the data waits.
    setImmediate(() => udp.onData(datagram(SRTP, 0), ADDR));
    await until(() => seen.length === 2 * count + 1, { timeoutMs: 5_000, intervalMs: 1, what: 'every datagram' });
    t.is(seen.indexOf('srtp'), 2, 'media handled after the first data datagram (and its microtasks), not after all of them');
    t.deepEqual(
      seen.filter((s) => s !== 'srtp'),
      Array.from({ length: count }, (_, i) => [`bulk${i}`, `after${i}`]).flat(),
    );
  });
});
