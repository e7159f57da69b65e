/**
 * The voice the text-to-speech fakes (OpenAI speech, Deepgram Aura, Cartesia) speak with, and the
 * timings they report. Two voices:
 *
 * - `tones` (default): a tone per letter or digit, silence for spaces and punctuation (the
 *   ElevenLabs fake's voice), so a test can predict every sample and every word's place exactly.
 * - `espeak`: the offline eSpeak-NG voice, real speech that the offline phrase recogniser can find
 *   in what a visitor hears (the end-to-end session tests), with espeak's own word and phoneme
 *   timings (IPA).
 */
import { concat } from '../../core/audio.ts';
import type { PhonemeTiming, WordTiming } from '../../core/frames.ts';
import { LocalTTSService } from '../../plugins/local/index.ts';
import { planFakeSpeech, renderFakeSpeech } from './elevenlabs.ts';

export type FakeVoiceName = 'tones' | 'espeak';

export interface FakeSpeech {
  readonly pcm: Int16Array;
  readonly sampleRate: number;
  /** Whitespace-separated words of the text, in ms from the start of `pcm`. */
  readonly words: readonly WordTiming[];
  /** Phonemes: espeak IPA for the espeak voice; for tones, each letter stands for one. */
  readonly phonemes: readonly PhonemeTiming[];
}

let espeak: LocalTTSService | undefined;

/** `text` spoken by `voice` at `sampleRate`, with word (and, for espeak, phoneme) timings. */
export async function fakeSpeech(text: string, sampleRate: number, voice: FakeVoiceName = 'tones'): Promise<FakeSpeech> {
  if (voice === 'espeak') return espeakSpeech(text, sampleRate);
  const { timings, totalSamples } = planFakeSpeech(text, sampleRate);
  const pcm = renderFakeSpeech(timings, sampleRate, 0, totalSamples);
  const words: WordTiming[] = [];
  const phonemes = timings.filter((t) => /[\p{L}\p{N}]/u.test(t.char)).map((t) => ({ phoneme: t.char.toLowerCase(), startMs: ms(t.startSample, sampleRate), endMs: ms(t.endSample, sampleRate) }));
  let current: { word: string; start: number; end: number } | undefined;
  for (const t of timings) {
    if (/\s/.test(t.char)) {
      if (current) words.push({ word: current.word, startMs: ms(current.start, sampleRate), endMs: ms(current.end, sampleRate) });
      current = undefined;
      continue;
    }
    current = current ? { ...current, word: current.word + t.char, end: t.endSample } : { word: t.char, start: t.startSample, end: t.endSample };
  }
  if (current) words.push({ word: current.word, startMs: ms(current.start, sampleRate), endMs: ms(current.end, sampleRate) });
  return { pcm, sampleRate, words, phonemes };
}

async function espeakSpeech(text: string, sampleRate: number): Promise<FakeSpeech> {
  espeak ??= new LocalTTSService();
  const parts: Int16Array[] = [];
  const words: WordTiming[] = [];
  const phonemes: PhonemeTiming[] = [];
  for await (const e of espeak.synthesize({ text, language: 'en', sampleRate })) {
    if (e.type === 'audio') parts.push(e.pcm);
    else if (e.type === 'words') words.push(...e.words);
    else phonemes.push(...e.phonemes);
  }
  return { pcm: concat(parts), sampleRate, words, phonemes };
}

const ms = (samples: number, rate: number) => Math.round((samples / rate) * 1000 * 10) / 10;
