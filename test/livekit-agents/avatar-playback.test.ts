/**
 * The playback positions the avatar reports to the agent (lk.playback_finished), told from the
 * face session's frames: what the visitor heard, not what was sent. Driven with frames shaped as
 * the face frame source emits them (plugins/face/face-frame-source.ts): `speechSamples` says how
 * many of the turn's samples a frame carried, 0 while the turn waits for more audio.
 */
import test from 'ava';
import { FACE_TIMING, type FaceFrame, type FaceFrameType } from '../../processors/avatar/face-model.ts';
import { AvatarPlayback } from '../../transports/livekit/avatar-playback.ts';

const SPF = FACE_TIMING.samplesPerFrame;
const RATE = FACE_TIMING.audioSampleRate;
let index = 0;
const frame = (type: FaceFrameType, turnId: number | null, speechSamples?: number): FaceFrame => ({
  index, ptsMs: index++ * 40, type, final: false, turnId,
  image: { width: 2, height: 2, format: 'rgb', data: new Uint8Array(12) },
  audio: new Int16Array(SPF),
  ...(speechSamples !== undefined ? { speechSamples } : {}),
});

test('an underrun inside a segment adds nothing to the position heard: a clear after it reports only the speech played', (t) => {
  const playback = new AvatarPlayback();
  const segment = playback.openSegment();
  playback.addSamples(segment, 6 * SPF); // the TTS's first sentence
  const events = [playback.observe(frame('speech-start', segment, SPF)).events];
  for (let i = 0; i < 4; i++) events.push(playback.observe(frame('speech', segment, SPF)).events);
  t.deepEqual(events.flat(), [{ type: 'started', segment }]);
  playback.observe(frame('speech', segment, SPF)); // 6 frames of speech: 0.24 s
  for (let i = 0; i < 10; i++) playback.observe(frame('speech', segment, 0)); // the TTS is late: 0.4 s of silent speech frames
  playback.addSamples(segment, 10 * SPF); // the next sentence arrives
  for (let i = 0; i < 3; i++) playback.observe(frame('speech', segment, SPF));
  const [finished] = playback.clear(0);
  t.like(finished, { type: 'finished', segment, interrupted: true });
  t.is(finished!.type === 'finished' ? finished!.positionS : NaN, (9 * SPF) / RATE, '9 frames of speech heard (0.36 s), not 19');
});

test('a segment cut short after some audio was taken plays it and finishes interrupted at the position heard; one cut before any finishes at 0', (t) => {
  const playback = new AvatarPlayback();
  const cut = playback.openSegment();
  playback.addSamples(cut, 3 * SPF + 100);
  t.deepEqual(playback.closeSegment(cut, { truncated: true }), [], 'what was taken still plays');
  t.is(playback.unplayedSamples, 3 * SPF + 100);
  playback.observe(frame('speech-start', cut, SPF));
  playback.observe(frame('speech', cut, SPF));
  playback.observe(frame('speech', cut, SPF));
  playback.observe(frame('speech', cut, 100)); // the last short frame
  t.is(playback.unplayedSamples, 0);
  const { events } = playback.observe(frame('fade-out', cut));
  t.deepEqual(events, [{ type: 'finished', segment: cut, positionS: (3 * SPF + 100) / RATE, interrupted: true }]);

  const early = playback.openSegment();
  t.deepEqual(playback.closeSegment(early, { truncated: true }), [{ type: 'finished', segment: early, positionS: 0, interrupted: true }]);
  const whole = playback.openSegment();
  playback.addSamples(whole, SPF);
  playback.closeSegment(whole);
  playback.observe(frame('speech-start', whole, SPF));
  t.deepEqual(playback.observe(frame('fade-out', whole)).events, [{ type: 'finished', segment: whole, positionS: SPF / RATE, interrupted: false }], 'a whole segment is not interrupted');
});

test('frames from a source that does not tell its speech samples count whole frames, as before', (t) => {
  const playback = new AvatarPlayback();
  const segment = playback.openSegment();
  playback.addSamples(segment, 2 * SPF);
  playback.closeSegment(segment);
  playback.observe(frame('speech-start', segment));
  playback.observe(frame('speech', segment));
  t.deepEqual(playback.observe(frame('fade-out', segment)).events, [{ type: 'finished', segment, positionS: (2 * SPF) / RATE, interrupted: false }]);
});
