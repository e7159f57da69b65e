/**
 * `localPlugin.warmUp()`: the offline engines' once-per-process work, done before the first
 * session needs it. Measured on a fresh server (2 cores): the first session heard its greeting
 * 1.1 s after client-ready, every later one 0.13 s; the difference was this work, run inside the
 * first session (starting the eSpeak-NG worker and compiling its WASM, the phrase templates of the
 * offline speech-to-text, the first synthesis's code paths), where it also stalled the live
 * sessions' frames and the REST API for about a second.
 *
 * What it does: builds the English phrase templates through the same `LocalPhraseSTT` path and
 * process-wide cache a session uses (which starts the shared eSpeak-NG worker), and synthesises one
 * short phrase at the pipelines' rate. Other languages still build theirs on first use.
 */
import { FACE_TIMING } from '../../processors/avatar/face-model.ts';
import { sharedEspeakEngine, type EspeakEngine } from './espeak-engine.ts';
import { LocalPhraseSTT } from './local-stt.ts';
import { LocalTTSService } from './local-tts.ts';

export const LOCAL_WARM_UP = {
  /** The language warmed: the Agent default (server/services/agent-defaults.ts). */
  language: 'en',
  /** The rate the voice pipelines ask the TTS for (the face's, which the bot runner's pipeline runs at). */
  sampleRate: FACE_TIMING.audioSampleRate,
  text: 'Hello.',
} as const;

export interface LocalWarmUpOptions {
  /** Default LOCAL_WARM_UP.language. */
  readonly language?: string;
  /** Default: the process's shared engine (what sessions use). */
  readonly engine?: EspeakEngine;
}

export async function warmLocalEngines(options: LocalWarmUpOptions = {}): Promise<void> {
  const language = options.language ?? LOCAL_WARM_UP.language;
  const engine = options.engine ?? sharedEspeakEngine();
  const templates = new LocalPhraseSTT({ engine }).recogniserFor(language).ready();
  const tts = new LocalTTSService({ language, engine });
  const synthesis = (async () => {
    for await (const event of tts.synthesize({ text: LOCAL_WARM_UP.text, language, sampleRate: LOCAL_WARM_UP.sampleRate })) void event;
  })();
  await Promise.all([templates, synthesis]);
}
