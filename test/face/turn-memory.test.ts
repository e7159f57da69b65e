/**
 * A turn left open for a long time (a `/realtime` client streaming for an hour; audio outside a
 * turn opens one and nothing need end it) holds a bounded window of its history around its play
 * position (SOURCE_DEFAULTS.turnHistoryMs), not all of it: its audio, the audio analysis's hops
 * and segments, its phoneme timings and their segments. And the frames are the same as with all
 * of it kept: every frame's pose (what the raster draws) and the articulation the animator is
 * given, compared with a source that keeps everything (`turnHistoryMs = Infinity`).
 *
 * Cheap: the frame source runs on a raster that only records poses (no rig, no pixels), over
 * synthetic speech-like audio (voiced syllables with stop-like pauses, hiss, quiet and loud hums,
 * long silences), pushed in uneven chunks with underruns, with and without phoneme timings
 * arriving in pieces (per chunk, re-sent from a little back, now and then the whole turn so far).
 * Then the audio analysis alone (AudioVisemeTracker's `settle` and `prune`) on material aimed at
 * what its pruning summarises.
 */
import test from 'ava';
import type { PhonemeTiming } from '../../core/frames.ts';
import { articulationAt } from '../../plugins/face/articulation.ts';
import { AudioVisemeTracker } from '../../plugins/face/audio-visemes.ts';
import { prng } from '../../plugins/face/face-animator.ts';
import { HumanFaceFrameSource } from '../../plugins/face/face-frame-source.ts';
import { openFace, type Face } from './pose-recorder.ts';
import { syntheticPhrase } from './speech-signal.ts';

const RATE = 16_000;

/** What the head turn holds (read from the source's internals; the same fields before and after the bound). */
function footprint(source: HumanFaceFrameSource): { audioBytes: number; hops: number; segments: number; phonemes: number; phonemeSegments: number } {
  const turn = (source as unknown as { turns: Array<{ heard: unknown; phonemes: unknown[]; segments: unknown[] }> }).turns[0]!;
  const heard = turn.heard as { audio: Int16Array; hops: unknown[]; out: unknown[] };
  return { audioBytes: heard.audio.byteLength, hops: heard.hops.length, segments: heard.out.length, phonemes: turn.phonemes.length, phonemeSegments: turn.segments.length };
}

interface Program {
  readonly pcm: Int16Array;
  /** Turn-relative, sorted. */
  readonly phonemes: PhonemeTiming[];
}

const PHONES = ['m', 'a', 'b', 'u', 's', 'i', 'f', 'p', 'o', 't', 'aɪ', 'ə', 'w', 'ʃ', 'eɪ', 'n'];

/**
 * `seconds` of speech-like audio: phrases of voiced syllables (their short pauses close like
 * stops), hiss (frication), hums under 350 Hz (murmur runs, quiet ones between loud sounds
 * closing the lips, loud ones not; some of several seconds), silences up to 5 s. Phoneme timings
 * (random sounds, a pause symbol over some silences) cover about two thirds of the sections.
 */
function program(seconds: number, seed: number): Program {
  const random = prng(seed);
  const parts: Int16Array[] = [];
  const phonemes: PhonemeTiming[] = [];
  let at = 0;
  const phrases = Array.from({ length: 6 }, (_, i) => syntheticPhrase(3 + 2 * i));
  while (at < seconds * RATE) {
    const r = random();
    let part: Int16Array;
    let timed: 'sounds' | 'pause' | 'none' = random() < 0.67 ? 'sounds' : 'none';
    if (r < 0.45) part = phrases[Math.floor(random() * phrases.length)]!;
    else if (r < 0.55) {
      part = new Int16Array(Math.round(RATE * (0.06 + 0.2 * random())));
      let prev = 0;
      const gain = 2000 + 8000 * random();
      for (let i = 0; i < part.length; i++) { const x = (random() * 2 - 1) * gain; part[i] = Math.round(x - prev); prev = x; }
    } else if (r < 0.72) {
      const long = random() < 0.35;
      part = new Int16Array(Math.round(RATE * (long ? 2.5 + 2.5 * random() : 0.03 + 0.3 * random())));
      const amplitude = random() < 0.5 ? 1500 : 9000, hz = 110 + 120 * random();
      for (let i = 0; i < part.length; i++) part[i] = Math.round(amplitude * Math.sin((2 * Math.PI * hz * i) / RATE));
    } else {
      const long = random() < 0.3;
      part = new Int16Array(Math.round(RATE * (long ? 2.2 + 3 * random() : 0.02 + 0.5 * random())));
      if (timed === 'sounds') timed = 'pause';
    }
    const startMs = (at / RATE) * 1000, endMs = ((at + part.length) / RATE) * 1000;
    if (timed === 'pause') phonemes.push({ phoneme: '_', startMs, endMs });
    else if (timed === 'sounds') {
      for (let t = startMs; t < endMs;) {
        const end = Math.min(endMs, t + 40 + 140 * random());
        phonemes.push({ phoneme: PHONES[Math.floor(random() * PHONES.length)]!, startMs: t, endMs: end });
        t = end;
      }
    }
    parts.push(part);
    at += part.length;
  }
  const pcm = new Int16Array(at);
  let o = 0;
  for (const p of parts) { pcm.set(p, o); o += p.length; }
  return { pcm, phonemes };
}

/**
 * Plays `p` as one open turn into every face in lockstep, as a client streaming it would: chunks
 * of 10-250 ms kept 100-900 ms ahead of the play position, now and then none for up to 1.2 s (the
 * turn waits); phoneme timings (`withPhonemes`) with the chunk they start in, now and then
 * re-sent from 1.5 s back or as the whole turn so far. `check` runs after every frame. At the end
 * the turn is ended and played out.
 */
async function play(p: Program, faces: Face[], withPhonemes: boolean, seed: number, check?: (frame: number) => void): Promise<void> {
  const random = prng(seed);
  let pushed = 0, played = 0, stallFrames = 0, frame = 0;
  const timings = (fromMs: number, toMs: number) => p.phonemes.filter((x) => x.startMs >= fromMs && x.startMs < toMs);
  const step = async () => {
    for (const face of faces) {
      const f = await face.source.nextFrame();
      face.frames.push({ type: f.type, speechSamples: f.speechSamples });
      if (face === faces[0]) played += f.speechSamples ?? 0;
    }
    check?.(frame++);
  };
  while (pushed < p.pcm.length) {
    if (stallFrames > 0) stallFrames--;
    else if (random() < 0.004) stallFrames = Math.floor(5 + 25 * random());
    const ahead = random() < 0.5 ? 100 : 900;
    while (stallFrames === 0 && pushed < p.pcm.length && pushed - played < (ahead / 1000) * RATE) {
      const n = Math.min(p.pcm.length - pushed, Math.round(RATE * (0.01 + 0.24 * random())));
      const fromMs = (pushed / RATE) * 1000, toMs = ((pushed + n) / RATE) * 1000;
      let list: PhonemeTiming[] = [];
      if (withPhonemes) {
        const r = random();
        list = r < 0.005 ? timings(-1, toMs) : r < 0.06 ? timings(fromMs - 1500, toMs) : timings(fromMs, toMs);
      }
      const chunk = p.pcm.subarray(pushed, pushed + n);
      for (const face of faces) face.source.pushAudio(chunk, list.length ? { phonemes: list } : undefined);
      pushed += n;
    }
    await step();
  }
  for (const face of faces) face.source.endTurn();
  while (faces[0]!.source.busy) await step();
}

test('a long open turn holds a bounded window of its audio, analysis and phoneme timings', async (t) => {
  t.timeout(180_000); // up to 22 s in loaded CI runs (longer beside other work); bounded well above that, and above the 120 s a test may otherwise go without a result
  const minutes = 5;
  const p = program(minutes * 60, 11);
  for (const withPhonemes of [false, true]) {
    const face = openFace();
    const peak = { audioBytes: 0, hops: 0, segments: 0, phonemes: 0, phonemeSegments: 0 };
    await play(p, [face], withPhonemes, 5, (frame) => {
      if (frame < 100 || (face.source as unknown as { turns: unknown[] }).turns.length === 0) return;
      const now = footprint(face.source);
      for (const k of Object.keys(peak) as Array<keyof typeof peak>) peak[k] = Math.max(peak[k], now[k]);
    });
    t.log(`${withPhonemes ? 'with phonemes' : 'audio only'}, ${minutes} min open: peak ${JSON.stringify(peak)}`);
    // 2 s behind the play position, up to ~1.2 s queued ahead of it.
    t.true(peak.audioBytes <= 256_000, `audio ${peak.audioBytes} bytes`);
    t.true(peak.hops <= 300, `hops ${peak.hops}`);
    t.true(peak.segments <= 300, `audio segments ${peak.segments}`);
    t.true(peak.phonemes <= 150, `phonemes ${peak.phonemes}`);
    t.true(peak.phonemeSegments <= 300, `phoneme segments ${peak.phonemeSegments}`);
    if (withPhonemes) t.true(peak.phonemes > 10, 'the timings were there to bound');
    t.true(face.frames.filter((f) => f.type === 'speech' || f.type === 'speech-start').length >= minutes * 60 * 25, 'played it all');
    face.source.close();
  }
});

for (const withPhonemes of [false, true]) {
  test(`forgetting a long open turn's history changes no frame (${withPhonemes ? 'phoneme timings in pieces' : 'audio only'})`, async (t) => {
    const p = program(150, withPhonemes ? 23 : 29);
    // Everything kept (the behaviour before the bound), the default window, and the shortest one.
    const faces = [openFace(Infinity), openFace(), openFace(0)];
    await play(p, faces, withPhonemes, withPhonemes ? 3 : 4);
    const [all, ...bounded] = faces as [Face, ...Face[]];
    const art = all.articulation;
    // The material crosses the forgetting many times with what reads back: closures, long pauses, both sources of shapes.
    t.true(art.filter((a) => a && a.closure >= 0.5).length >= 50, 'closures');
    t.true(art.filter((a) => a && a.pauseMs >= 2500).length >= 100, 'pauses longer than the window');
    t.true(art.filter((a) => a && !a.fromPhonemes).length >= 500, 'shapes from the audio');
    if (withPhonemes) t.true(art.filter((a) => a?.fromPhonemes).length >= 1000, 'shapes from the phoneme timings');
    for (const face of bounded) {
      t.true((face.source as unknown as { turns: unknown[] }).turns.length === 0);
      t.is(face.frames.length, all.frames.length);
      t.deepEqual(face.frames, all.frames);
      let firstDiff = -1;
      for (let i = 0; i < all.raster.poses.length && firstDiff < 0; i++) {
        if (JSON.stringify(face.articulation[i]) !== JSON.stringify(art[i]) || JSON.stringify(face.raster.poses[i]) !== JSON.stringify(all.raster.poses[i])) firstDiff = i;
      }
      t.is(firstDiff, -1, firstDiff < 0 ? '' : `frame ${firstDiff}: ${JSON.stringify(face.articulation[firstDiff])} vs ${JSON.stringify(art[firstDiff])}`);
      t.deepEqual(face.articulation, art);
      t.deepEqual(face.raster.poses, all.raster.poses);
    }
    for (const face of faces) face.source.close();
  });
}

/**
 * The audio analysis alone, on material aimed at what its pruning keeps as a summary: murmur runs
 * (hums) longer than the window judged against the sounds before them only (a silence after) or
 * after them, one louder in its pruned part, murmurs between a silence and a slowly rising sound;
 * frames shaped from phoneme timings (no `segments` call: `settle` keeps the analysis up) in
 * blocks of 1-8 frames, so the analysis switches back at every kind of place. Frame by frame as the source asks.
 */
test('the audio analysis forgets exactly: a tracker pruned behind the play position shapes every frame as one that keeps all', (t) => {
  const random = prng(41);
  const parts: Int16Array[] = [];
  const tone = (seconds: number, amplitude: number, hz = 150) => Int16Array.from({ length: Math.round(RATE * seconds) }, (_, i) => Math.round(amplitude * Math.sin((2 * Math.PI * hz * i) / RATE)));
  const silence = (seconds: number) => new Int16Array(Math.round(RATE * seconds));
  // A steady open vowel-like sound (two formants), rising over `riseS` from silence.
  const vowel = (seconds: number, riseS = 0) => Int16Array.from({ length: Math.round(RATE * seconds) }, (_, i) =>
    Math.round(Math.min(1, i / RATE / Math.max(1e-9, riseS)) * 8000 * (Math.sin((2 * Math.PI * 650 * i) / RATE) + Math.sin((2 * Math.PI * 1150 * i) / RATE))));
  const long = () => 2.5 + 2 * random();
  for (let i = 0; i < 80; i++) {
    const r = random();
    // A quiet hum longer than the window after a loud sound, then silence: judged by what came before it.
    if (r < 0.1) parts.push(vowel(0.3), tone(long(), 1500), silence(0.3 + random()));
    // After silence, loud then quiet (the loud part pruned while open), then a loud sound.
    else if (r < 0.2) parts.push(silence(1), tone(1, 10_000), tone(long() - 1, 1500), vowel(0.3));
    else if (r < 0.25) parts.push(vowel(0.2), tone(long(), 12_000), vowel(0.2));
    else if (r < 0.3) parts.push(silence(2.5 + 3 * random()), vowel(0.2));
    else if (r < 0.4) parts.push(syntheticPhrase(2));
    // A short murmur between a silence and a slowly rising sound: judged by the sound after it.
    else parts.push(silence(0.1 + 0.2 * random()), tone(0.03 + 0.06 * random(), 2500), vowel(0.2, 0.03 + 0.05 * random()));
  }
  const pcm = new Int16Array(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((at, p) => (pcm.set(p, at), at + p.length), 0);

  for (const historyMs of [250, 2000]) {
    const all = new AudioVisemeTracker(), kept = new AudioVisemeTracker();
    const allHint = { from: 0 }, keptHint = { from: 0 };
    let pushed = 0, heardFor = 0, timedFor = 0, compared = 0, closed = 0;
    for (let frame = 0; frame * 640 < pcm.length; frame++) {
      while (pushed < pcm.length && pushed < frame * 640 + RATE * (random() < 0.5 ? 0.1 : 0.9)) {
        const chunk = pcm.subarray(pushed, pushed + Math.round(RATE * (0.01 + 0.24 * random())));
        all.push(chunk);
        kept.push(chunk);
        pushed += chunk.length;
      }
      if (heardFor === 0 && timedFor === 0) {
        if (random() < 0.5) heardFor = 1 + Math.floor(8 * random());
        else timedFor = 1 + Math.floor(8 * random());
      }
      const ms = frame * 40, ended = pushed === pcm.length;
      if (heardFor > 0) {
        heardFor--;
        const a = articulationAt(all.segments(ms + 400, ended), ms, allHint);
        const b = articulationAt(kept.segments(ms + 400, ended), ms, keptHint);
        if (JSON.stringify(a) !== JSON.stringify(b)) { t.fail(`history ${historyMs} ms, frame ${frame}: ${JSON.stringify(b)} vs ${JSON.stringify(a)}`); return; }
        compared++;
        if (a.closure >= 0.5) closed++;
      } else timedFor--;
      // As the source's `forget` does after each speech frame.
      const playedMs = ms + 40;
      if (playedMs > historyMs) {
        kept.settle(playedMs - 10);
        keptHint.from = Math.max(0, keptHint.from - kept.prune(playedMs - historyMs));
      }
    }
    t.true(compared > 1000 && closed > 30, `${compared} frames compared, ${closed} closed`);
    const held = kept as unknown as { hops: unknown[]; out: unknown[] }, full = all as unknown as { hops: unknown[] };
    t.true(held.hops.length < 300 && full.hops.length > 10_000, `${held.hops.length} hops held of ${full.hops.length}`);
  }
});
