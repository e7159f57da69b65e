/**
 * A turn streamed slower than real time: frames that carry less than 40 ms of the turn's audio
 * (an underrun mid-frame, the rest padding) must not move the mouth ahead of the sound. Each
 * frame's mouth shapes are read at the turn's audio time of its first sample, the sum of the
 * speech samples played before it.
 */
import test from 'ava';
import type { PhonemeTiming } from '../../core/frames.ts';
import { openFace } from './pose-recorder.ts';

const RATE = 16_000;

/** A voiced tone (the audio's content does not matter here: the phoneme timings drive the mouth). */
const voiced = (samples: number, from: number) => Int16Array.from({ length: samples }, (_, i) => Math.round(6000 * Math.sin((2 * Math.PI * 180 * (from + i)) / RATE)));

test('a turn streamed at half real time: the lips close when the sound of the /m/ plays, not when 40 ms a frame would have reached it', async (t) => {
  const face = openFace();
  // "a" for a second, "m" 1.0-1.2 s (the lips closed), "a" again to 3 s: turn-relative audio time.
  const phonemes: PhonemeTiming[] = [
    { phoneme: 'a', startMs: 0, endMs: 1000 },
    { phoneme: 'm', startMs: 1000, endMs: 1200 },
    { phoneme: 'a', startMs: 1200, endMs: 3000 },
  ];
  let pushed = 1280;
  face.source.pushAudio(voiced(pushed, 0), { phonemes });
  let consumed = 0;
  const at: { startMs: number; closure: number }[] = [];
  while (consumed < 2200 * (RATE / 1000)) {
    // 20 ms more each frame: after the first 80 ms are played, each frame carries 20 ms of speech.
    face.source.pushAudio(voiced(320, pushed));
    pushed += 320;
    const frame = await face.source.nextFrame();
    const art = face.articulation.at(-1);
    if (frame.type === 'speech' || frame.type === 'speech-start') {
      if (art) at.push({ startMs: (consumed / RATE) * 1000, closure: art.closure });
      consumed += frame.speechSamples ?? 0;
    }
  }
  t.true(at.filter((a) => a.startMs >= 200).length > 50, 'most frames were partial (20 ms of speech each)');
  const peak = at.reduce((best, a) => (a.closure > best.closure ? a : best));
  t.true(peak.closure > 0.5, `the lips close (closure ${peak.closure.toFixed(2)})`);
  // Anticipation may start a closure a little before its sound; not half a second before.
  t.true(peak.startMs >= 900 && peak.startMs < 1200, `closed most at ${peak.startMs.toFixed(0)} ms of the turn's audio (the /m/ is at 1000-1200 ms)`);
  for (const a of at.filter((x) => x.startMs < 800)) t.true(a.closure < 0.2, `open during the first "a" (closure ${a.closure.toFixed(2)} at ${a.startMs.toFixed(0)} ms)`);
});
