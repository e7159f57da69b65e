import { readFileSync } from 'node:fs';
import test from 'ava';
import {
  ProtocolError,
  decodeAudioIn,
  decodeFrameOut,
  encodeAudioIn,
  encodeFrameOut,
  parseClientMessage,
  REALTIME_LIMITS,
  type FrameOutMessage,
  type RealtimeErrorCode,
} from '../../protocol/realtime.ts';
import { FACE_TIMING } from '../../processors/avatar/face-model.ts';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const fromHex = (h: string) => new Uint8Array(Buffer.from(h.replace(/\s+/g, ''), 'hex'));

/** The golden bytes both languages read (the Python client's tests/test_protocol.py reads the same file). */
interface FrameVector {
  name: string;
  hex: string;
  type: FrameOutMessage['type'];
  final: boolean;
  index: number;
  pts_ms: number;
  turn_id: number | null;
  width: number;
  height: number;
  image_format: FrameOutMessage['imageFormat'];
  image: string | null;
  audio: number[];
}
const fixture = JSON.parse(readFileSync(new URL('../../protocol/fixtures/realtime-frames.json', import.meta.url), 'utf8')) as {
  audio_in: Array<{ name: string; hex: string; sequence: number; end_of_turn: boolean; pcm: number[] }>;
  frame_out: FrameVector[];
  frame_out_decode_only: FrameVector[];
  malformed_audio_in: Array<{ name: string; hex: string; code: RealtimeErrorCode }>;
  malformed_frame_out: Array<{ name: string; hex: string; code: RealtimeErrorCode }>;
};
const frameOf = (v: FrameVector): FrameOutMessage => ({
  type: v.type,
  final: v.final,
  index: v.index,
  ptsMs: v.pts_ms,
  turnId: v.turn_id,
  width: v.width,
  height: v.height,
  imageFormat: v.image_format,
  image: v.image === null ? undefined : fromHex(v.image),
  audio: new Int16Array(v.audio),
});
const vector = <T extends { name: string }>(list: T[], name: string): T => {
  const found = list.find((v) => v.name === name);
  if (!found) throw new Error(`protocol/fixtures/realtime-frames.json has no vector named ${name}`);
  return found;
};

test('the shared fixture: every vector encodes to its golden bytes and decodes to its values', (t) => {
  t.true(fixture.audio_in.length >= 1 && fixture.frame_out.length >= 2, 'the fixture holds vectors');
  for (const v of fixture.audio_in) {
    const bytes = encodeAudioIn(new Int16Array(v.pcm), v.sequence, v.end_of_turn);
    t.is(hex(bytes), hex(fromHex(v.hex)), v.name);
    t.deepEqual(decodeAudioIn(fromHex(v.hex)), { sequence: v.sequence, endOfTurn: v.end_of_turn, pcm: new Int16Array(v.pcm) }, v.name);
  }
  for (const v of fixture.frame_out) {
    t.is(hex(encodeFrameOut(frameOf(v))), hex(fromHex(v.hex)), v.name);
    t.deepEqual(decodeFrameOut(fromHex(v.hex)), frameOf(v), v.name);
  }
  for (const v of fixture.frame_out_decode_only) t.deepEqual(decodeFrameOut(fromHex(v.hex)), frameOf(v), v.name);
});

test('the shared fixture: every malformed vector is refused with its code', (t) => {
  t.true(fixture.malformed_audio_in.length >= 4 && fixture.malformed_frame_out.length >= 6, 'the fixture holds vectors');
  for (const v of fixture.malformed_audio_in) {
    t.is(t.throws(() => decodeAudioIn(fromHex(v.hex)), { instanceOf: ProtocolError }, v.name)?.code, v.code, v.name);
  }
  for (const v of fixture.malformed_frame_out) {
    t.is(t.throws(() => decodeFrameOut(fromHex(v.hex)), { instanceOf: ProtocolError }, v.name)?.code, v.code, v.name);
  }
});

test('audio-in messages encode to the documented bytes (golden)', (t) => {
  const golden = vector(fixture.audio_in, 'two samples, sequence 5, end of turn').hex;
  const bytes = encodeAudioIn(new Int16Array([1, -2]), 5, true);
  t.is(hex(bytes), hex(fromHex(golden)));
  t.deepEqual(decodeAudioIn(bytes), { sequence: 5, endOfTurn: true, pcm: new Int16Array([1, -2]) });
});

test('frame-out messages encode to the documented bytes (golden)', (t) => {
  const golden = vector(fixture.frame_out, 'final speech frame with a 2-byte JPEG and two samples').hex;
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
    ...fixture.malformed_audio_in.map((v): [Uint8Array, RealtimeErrorCode] => [fromHex(v.hex), v.code]),
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
  const golden = vector(fixture.frame_out, 'idle RGB frame without its image: flag bit 1 clear, length 0, format 1').hex;
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

test("the wire's audio rate is the face models' rate (the protocol states it on its own: protocol/ imports nothing of ours)", (t) => {
  t.is(REALTIME_LIMITS.audioSampleRate, FACE_TIMING.audioSampleRate);
});
