/**
 * A phoneme-timed speech corpus made with eSpeak-NG (the offline TTS), as ground truth for lip
 * articulation (issue #29): several voices and speeds, sentences rich in bilabials, rounded and
 * spread vowels and labiodentals. eSpeak reports when each phoneme starts in its own audio, so
 * every frame's sound is known.
 *
 * `CorpusFace` plays utterances through a real face source (inline raster, the same code a
 * session runs), as a TTS and the avatar processor feed it (200 ms chunks, each with the
 * phonemes starting in it) or as audio alone, and measures every frame's picture with
 * `articulationMetrics`.
 */
import { concat } from '../../core/audio.ts';
import type { PhonemeTiming, WordTiming } from '../../core/frames.ts';
import { wordSounds } from '../../processors/tts/letter-sounds.ts';
import { LocalTTSService } from '../../plugins/local/local-tts.ts';
import { articulationMetrics, restCornerHeight, type ArticulationMetrics } from '../../plugins/face/face-metrics.ts';
import type { FaceReference } from '../../processors/avatar/face-model.ts';
import type { HumanFaceFrameSource } from '../../plugins/face/face-frame-source.ts';
import type { InlineFaceRaster } from '../../plugins/face/face-raster.ts';
import type { FaceRenderer } from '../../plugins/face/face-renderer.ts';
import { HumanFaceModel } from '../../plugins/face/index.ts';
import type { FaceReferenceCache } from '../../plugins/face/face-reference-cache.ts';
import { visemesOf } from '../../plugins/face/visemes.ts';

export interface Utterance {
  readonly voice: string;
  readonly rateWpm: number;
  readonly text: string;
  /** 16 kHz mono. */
  readonly pcm: Int16Array;
  readonly phonemes: readonly PhonemeTiming[];
  /** eSpeak's word timings (for the character-timed path). */
  readonly words: readonly WordTiming[];
}

/** Sentences for the measured corpus. */
export const CORPUS_SENTENCES = [
  'Maybe we should move over the blue boat before five.',
  'People see each small movie from the window.',
  'Bob made a beautiful map of the old moon.',
  'We often buy food for the poor.',
] as const;

/** Voices (American, British, a female variant) and speeds (slow, default, fast). */
export const CORPUS_VOICES = ['en-us', 'en', 'en-us+f3'] as const;
export const CORPUS_RATES = [140, 175, 230] as const;

export async function synthesize(text: string, voice: string, rateWpm: number): Promise<Utterance> {
  const tts = new LocalTTSService({ voice, rateWpm });
  const parts: Int16Array[] = [];
  const phonemes: PhonemeTiming[] = [];
  const words: WordTiming[] = [];
  for await (const e of tts.synthesize({ text, sampleRate: 16_000 })) {
    if (e.type === 'audio') parts.push(e.pcm);
    else if (e.type === 'phonemes') phonemes.push(...e.phonemes);
    else if (e.type === 'words') words.push(...e.words);
  }
  return { voice, rateWpm, text, pcm: concat(parts), phonemes, words };
}

/**
 * What a TTS that times characters but reports no phonemes (ElevenLabs' alignment) gives the
 * face for `u`, as the plugin turns it into sounds (processors/tts/letter-sounds.ts). The
 * characters are timed without knowing the sounds: each word's letters share its time, a vowel
 * letter twice a consonant's share (vowels last longer); a real aligner times characters closer
 * to their sounds, so this is the harder case.
 */
export function letterPhonemes(u: Utterance): PhonemeTiming[] {
  return u.words.flatMap((w) => {
    const letters = [...w.word];
    const weights = letters.map((c) => (/[aeiouy]/i.test(c) ? 2 : /[a-z]/i.test(c) ? 1 : 0.25));
    const unit = (w.endMs - w.startMs) / Math.max(1e-9, weights.reduce((a, b) => a + b, 0));
    let at = w.startMs;
    return wordSounds(letters.map((char, i) => {
      const c = { char, startMs: at, endMs: at + weights[i]! * unit };
      at = c.endMs;
      return c;
    }));
  });
}

/** Every sentence in every voice at every speed (or the subsets given). */
export async function corpus(
  sentences: readonly string[] = CORPUS_SENTENCES, voices: readonly string[] = CORPUS_VOICES, rates: readonly number[] = CORPUS_RATES,
): Promise<Utterance[]> {
  const out: Utterance[] = [];
  for (const voice of voices) for (const rate of rates) for (const text of sentences) out.push(await synthesize(text, voice, rate));
  return out;
}

export interface FrameRecord extends ArticulationMetrics {
  /** Frame index from the turn's first speech frame; its audio spans [40 * i, 40 * i + 40) ms. */
  readonly index: number;
  readonly type: string;
  /** Phoneme sounding at the frame's centre ('' after the audio). */
  readonly phoneme: string;
  /** Loudness of the frame's audio (dBFS). */
  readonly levelDb: number;
}

export interface RenderedUtterance {
  readonly frames: FrameRecord[];
  readonly restCornerHeight: number;
  readonly mouthWidthPx: number;
}

/**
 * One face (a `variant` source at 640x360 by default, seeded, rendering inline) that plays
 * utterances one after another, each as a turn followed by `tailFrames` of silence, and measures
 * every frame of each from the turn's first speech frame. One rig for the whole corpus.
 */
export class CorpusFace {
  private constructor(private readonly source: HumanFaceFrameSource) {}

  static async open(
    cache: FaceReferenceCache, variant: 'human-portrait' | 'human-presence',
    options: { configuration?: Record<string, unknown>; width?: number; height?: number; referenceImage?: FaceReference } = {},
  ): Promise<CorpusFace> {
    const model = new HumanFaceModel(variant, { referenceCache: cache, renderThreads: 0 });
    const configuration = { width: options.width ?? 640, height: options.height ?? 360, seed: 3, ...options.configuration };
    return new CorpusFace(await model.openSource({ configuration, referenceImage: options.referenceImage }, { inline: true }));
  }

  get renderer(): FaceRenderer { return (this.source.raster as InlineFaceRaster).renderer; }

  /**
   * Plays `u` with its phoneme timings (as a TTS and the avatar processor feed them: 200 ms
   * chunks, each with the phonemes starting in it), with the sounds a character-timed TTS gives
   * (`letters`: `letterPhonemes`), or from the audio alone. Frames are labelled with eSpeak's
   * phonemes in every mode. `images` (optional) receives each measured frame's RGB picture.
   */
  async play(u: Utterance, mode: 'phonemes' | 'letters' | 'audio', options: { tailFrames?: number; images?: Uint8Array[] } = {}): Promise<RenderedUtterance> {
    const source = this.source, renderer = this.renderer;
    const chunk = 3200;
    const fed = mode === 'phonemes' ? u.phonemes : mode === 'letters' ? letterPhonemes(u) : [];
    source.startTurn();
    for (let at = 0; at < u.pcm.length; at += chunk) {
      const startMs = at / 16, endMs = Math.min(u.pcm.length, at + chunk) / 16;
      const phonemes = fed.filter((p) => p.startMs >= startMs && p.startMs < endMs);
      source.pushAudio(u.pcm.subarray(at, at + chunk), phonemes.length ? { phonemes } : undefined);
    }
    source.endTurn();
    const frames: FrameRecord[] = [];
    const tail = options.tailFrames ?? 25;
    let index = -1, after = 0;
    for (;;) {
      const f = await source.nextFrame();
      if (f.type === 'speech-start') index = 0;
      if (index < 0) continue; // an idle frame before the turn starts
      const centreMs = index * 40 + 20;
      const ph = u.phonemes.find((p) => p.startMs <= centreMs && centreMs < p.endMs);
      let energy = 0;
      for (const v of f.audio) energy += (v / 32768) ** 2;
      const levelDb = 10 * Math.log10(energy / f.audio.length + 1e-12);
      frames.push({ ...articulationMetrics(renderer.rig, renderer.mesh, f.image.data), index, type: f.type, phoneme: ph?.phoneme ?? '', levelDb });
      options.images?.push(f.image.data);
      index++;
      if (f.type === 'idle' || f.type === 'fade-out') after++;
      if (after >= tail) break;
    }
    return { frames, restCornerHeight: restCornerHeight(renderer.rig), mouthWidthPx: renderer.rig.mouthWidth };
  }

  close(): void { this.source.close(); }
}

const soundsOf = (phoneme: string) => visemesOf(phoneme);
export const isBilabial = (phoneme: string) => soundsOf(phoneme).some((s) => s.closed);
/** Rounded vowels (u, ʊ, o, ɔ and their long and r-coloured forms). */
export const isRoundedVowel = (phoneme: string) => soundsOf(phoneme).some((s) => s.jawDominance === 1 && !s.closed && s.round >= 0.7);
export const isW = (phoneme: string) => /^[wʍ]$/u.test(phoneme);
/** /i/ (the close front vowel, long or short-tense). */
export const isCloseFront = (phoneme: string) => /^iː?$/u.test(phoneme);
/** Open vowels: a, ɑ, æ, ʌ, ɒ and diphthongs starting there. */
export const isOpenVowel = (phoneme: string) => { const s = soundsOf(phoneme)[0]!; return s.jawDominance === 1 && !s.closed && s.open >= 0.7; };

/** Frames whose audio window overlaps [startMs - 40, endMs + 40): the phoneme, +-1 frame. */
export function framesAround(frames: readonly FrameRecord[], p: PhonemeTiming, slackFrames = 1): FrameRecord[] {
  return frames.filter((f) => f.index * 40 < p.endMs + 40 * slackFrames && f.index * 40 + 40 > p.startMs - 40 * slackFrames);
}
