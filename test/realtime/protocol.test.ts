import test from 'ava';
import {
  ProtocolError,
  decodeAudioIn,
  decodeFrameOut,
  encodeAudioIn,
  encodeFrameOut,
  parseClientMessage,
  REALTIME_LIMITS,
  type RealtimeErrorCode,
} from '../../transports/realtime/protocol.ts';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const fromHex = (h: string) => new Uint8Array(Buffer.from(h.replace(/\s+/g, ''), 'hex'));

test('audio-in messages encode to the documented bytes (golden)', (t) => {
  const bytes = encodeAudioIn(new Int16Array([1, -2]), 5, true);
  t.is(hex(bytes), '0101010005000000' + '0100feff');
  t.deepEqual(decodeAudioIn(bytes), { sequence: 5, endOfTurn: true, pcm: new Int16Array([1, -2]) });
});

test('frame-out messages encode to the documented bytes (golden)', (t) => {
  const golden = `
    02 01 02 03  02 01 00 00  50 28 00 00  03 00 00 00
    80 02 68 01  02 00 00 00  02 00 00 00
    ff d8
    05 00 ff ff`;
  const message = {
    type: 'speech' as const,
    final: true,
    index: 258,
    ptsMs: 10_320,
    turnId: 3,
    width: 640,
    height: 360,
    imageFormat: 'jpeg' as const,
    image: new Uint8Array([0xff, 0xd8]),
    audio: new Int16Array([5, -1]),
  };
  t.is(hex(encodeFrameOut(message)), hex(fromHex(golden)));
  t.deepEqual(decodeFrameOut(fromHex(golden)), message);
});

test('a frame without an image round-trips with image absent and turn id null', (t) => {
  const message = { type: 'idle' as const, final: false, index: 0, ptsMs: 0, turnId: null, width: 1280, height: 720, imageFormat: 'rgb' as const, image: undefined, audio: new Int16Array(640) };
  t.deepEqual(decodeFrameOut(encodeFrameOut(message)), message);
});

test('decoding audio refuses malformed and oversized messages with typed errors', (t) => {
  const cases: Array<[Uint8Array, RealtimeErrorCode]> = [
    [new Uint8Array([1, 1, 0]), 'malformed_message'],
    [fromHex('0201000000000000'), 'malformed_message'],
    [fromHex('0109000000000000'), 'malformed_message'],
    [fromHex('010100000000000001'), 'malformed_message'],
    [new Uint8Array(REALTIME_LIMITS.maxMessageBytes + 1).fill(1), 'frame_too_large'],
  ];
  const longAudio = encodeAudioIn(new Int16Array(16_001), 0);
  cases.push([longAudio, 'frame_too_large']);
  for (const [bytes, code] of cases) {
    const err = t.throws(() => decodeAudioIn(bytes), { instanceOf: ProtocolError });
    t.is(err?.code, code);
  }
});

test('decoding a frame refuses a length that disagrees with its header', (t) => {
  const bytes = encodeFrameOut({ type: 'speech', final: false, index: 1, ptsMs: 40, turnId: 1, width: 2, height: 2, imageFormat: 'jpeg', image: new Uint8Array(4), audio: new Int16Array(640) });
  t.throws(() => decodeFrameOut(bytes.subarray(0, bytes.length - 1)), { instanceOf: ProtocolError });
});

test('client text messages: known types parse, anything else is malformed', (t) => {
  t.deepEqual(parseClientMessage('{"type":"start_turn"}'), { type: 'start_turn' });
  t.deepEqual(parseClientMessage('{"type":"cancel"}'), { type: 'cancel' });
  for (const bad of ['not json', '[]', '{"type":"explode"}', '{}', 'null', '"start_turn"']) {
    const err = t.throws(() => parseClientMessage(bad), { instanceOf: ProtocolError });
    t.is(err?.code, 'malformed_message');
  }
});

test('webrtc settings are validated: embedded room + token, or a ws(s) LiveKit url + token', (t) => {
  t.deepEqual(parseClientMessage('{"type":"webrtc","settings":{"provider":"embedded","room":"r1","token":"t"}}'), {
    type: 'webrtc',
    settings: { provider: 'embedded', room: 'r1', token: 't' },
  });
  t.truthy(parseClientMessage('{"type":"webrtc","settings":{"provider":"livekit","url":"wss://lk.example","token":"t"}}'));
  for (const bad of [
    '{"type":"webrtc"}',
    '{"type":"webrtc","settings":{"provider":"livekit","url":"http://x","token":"t"}}',
    '{"type":"webrtc","settings":{"provider":"embedded","room":"","token":"t"}}',
    '{"type":"webrtc","settings":{"provider":"other","room":"r","token":"t"}}',
  ]) {
    const err = t.throws(() => parseClientMessage(bad), { instanceOf: ProtocolError });
    t.is(err?.code, 'malformed_message');
  }
});

test('an idle RGB frame without its image encodes to the documented bytes (golden): flag bit 1 clear, length 0, format 1', (t) => {
  const golden = `
    02 01 00 00  07 00 00 00  18 01 00 00  00 00 00 00
    00 05 d0 02  00 00 00 00  01 00 01 00
    00 80`;
  const message = { type: 'idle' as const, final: false, index: 7, ptsMs: 280, turnId: null, width: 1280, height: 720, imageFormat: 'rgb' as const, image: undefined, audio: new Int16Array([-32768]) };
  t.is(hex(encodeFrameOut(message)), hex(fromHex(golden)));
  t.deepEqual(decodeFrameOut(fromHex(golden)), message);
});

test('frame decoding refuses an unknown image format or image bytes without the image flag; reserved flag bits are ignored', (t) => {
  const base = encodeFrameOut({ type: 'speech', final: false, index: 1, ptsMs: 40, turnId: 1, width: 2, height: 2, imageFormat: 'jpeg', image: new Uint8Array(4), audio: new Int16Array(2) });
  const badFormat = base.slice();
  badFormat[26] = 2;
  const noFlag = base.slice();
  noFlag[3] = 0;
  for (const bytes of [badFormat, noFlag]) t.is(t.throws(() => decodeFrameOut(bytes), { instanceOf: ProtocolError })?.code, 'malformed_message');
  const reserved = base.slice();
  reserved[3] = 0x82;
  t.is(decodeFrameOut(reserved).image?.length, 4);
});

test('audio chunks: exactly 1 s (16,000 samples) decodes, 16,001 is frame_too_large', (t) => {
  t.is(decodeAudioIn(encodeAudioIn(new Int16Array(16_000), 0)).pcm.length, 16_000);
  t.is(t.throws(() => decodeAudioIn(encodeAudioIn(new Int16Array(16_001), 0)), { instanceOf: ProtocolError })?.code, 'frame_too_large');
});
