import test from 'ava';
import { concat, silence } from '../../core/audio.ts';
import type { WordTiming } from '../../core/frames.ts';
import { LocalTTSService } from '../../plugins/local/local-tts.ts';
import { WebRtcVADAnalyzer } from '../../plugins/local/webrtc-vad.ts';
import type { LocalEngineError } from '../../plugins/local/local-engine-error.ts';

async function speech(text: string, sampleRate: number): Promise<{ pcm: Int16Array; words: WordTiming[] }> {
  const parts: Int16Array[] = [];
  const words: WordTiming[] = [];
  for await (const e of new LocalTTSService().synthesize({ text, sampleRate })) {
    if (e.type === 'audio') parts.push(e.pcm);
    if (e.type === 'words') words.push(...e.words);
  }
  return { pcm: concat(parts), words };
}

function confidences(vad: WebRtcVADAnalyzer, pcm: Int16Array): number[] {
  const out: number[] = [];
  for (let i = 0; i + vad.windowSamples <= pcm.length; i += vad.windowSamples) out.push(vad.confidence(pcm.subarray(i, i + vad.windowSamples)));
  return out;
}

/** Deterministic white noise at a given peak amplitude. */
function noise(ms: number, sampleRate: number, amplitude: number): Int16Array {
  let seed = 7;
  const out = new Int16Array((sampleRate * ms) / 1000);
  for (let i = 0; i < out.length; i++) {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    out[i] = Math.round(((seed / 0x7fffffff) * 2 - 1) * amplitude);
  }
  return out;
}

for (const sampleRate of [16000, 48000]) {
  test(`calls synthetic speech speech and silence silence at ${sampleRate} Hz`, async (t) => {
    const { pcm, words } = await speech('Good morning, I would like to book a table for two.', sampleRate);
    const vad = new WebRtcVADAnalyzer({ sampleRate });
    const leadMs = 500;
    const signal = concat([silence(leadMs, sampleRate), pcm, silence(1000, sampleRate)]);
    const conf = confidences(vad, signal);
    const windowMs = (vad.windowSamples / sampleRate) * 1000;
    const at = (ms: number) => conf[Math.floor(ms / windowMs)]!;
    for (let ms = 0; ms < leadMs; ms += windowMs) t.is(at(ms), 0, `silence at ${ms} ms`);
    // Inside each word (after the first 60 ms of it) the detector must be confident.
    const inside = words.flatMap((w) => {
      const list: number[] = [];
      for (let ms = w.startMs + 60; ms < w.endMs; ms += windowMs) list.push(at(leadMs + ms));
      return list;
    });
    t.true(inside.length > 20);
    const confident = inside.filter((c) => c > 0.7).length / inside.length;
    t.true(confident > 0.9, `${(confident * 100).toFixed(0)}% of in-word windows above 0.7`);
    const tailStart = leadMs + (pcm.length / sampleRate) * 1000 + 300;
    t.true(at(tailStart) < 0.1, `released ${at(tailStart)} 300 ms after speech`);
  });
}

test('a steady noise floor is not speech, including the warm-up after a reset', (t) => {
  const vad = new WebRtcVADAnalyzer();
  for (const amplitude of [0, 30, 300, 1000]) {
    vad.reset();
    const max = Math.max(...confidences(vad, noise(2000, 16000, amplitude)));
    t.true(max < 0.5, `peak confidence ${max} for noise of amplitude ${amplitude}`);
  }
});

test('confidence rises within two windows and falls gradually', (t) => {
  const vad = new WebRtcVADAnalyzer({ warmUpMs: 0 });
  const loud = noise(20, 16000, 6000);
  const quiet = new Int16Array(320);
  t.true(vad.isSpeech(loud), 'libfvad calls loud broadband noise speech (it is a VAD, not a speech classifier)');
  vad.reset();
  const rise = [vad.confidence(loud), vad.confidence(loud)];
  t.true(rise[0]! > 0.5 && rise[1]! > 0.8, `rise ${rise}`);
  for (let i = 0; i < 20; i++) vad.confidence(loud);
  // libfvad keeps saying speech for a few windows after speech (its own hangover), then the
  // smoothing releases over four more windows.
  const fall = Array.from({ length: 12 }, () => vad.confidence(quiet));
  t.true(fall[0]! > 0.6, `first quiet window ${fall[0]}`);
  t.true(fall[11]! < 0.35, `fall ${fall.map((c) => c.toFixed(2))}`);
  const released = fall.slice(-4);
  t.true(released.every((c, i) => i === 0 || c < released[i - 1]!), 'decays steadily once libfvad says silence');
});

test('rejects rates, windows and modes libfvad does not support, and wrong-sized windows', (t) => {
  const code = (fn: () => unknown) => (t.throws(fn) as LocalEngineError).code;
  t.is(code(() => new WebRtcVADAnalyzer({ sampleRate: 44100 })), 'unsupported_sample_rate');
  t.is(code(() => new WebRtcVADAnalyzer({ windowMs: 25 })), 'invalid_options');
  t.is(code(() => new WebRtcVADAnalyzer({ mode: 4 })), 'invalid_options');
  const vad = new WebRtcVADAnalyzer({ sampleRate: 8000, windowMs: 30 });
  t.is(vad.windowSamples, 240);
  t.is(code(() => vad.confidence(new Int16Array(100))), 'invalid_options');
});
