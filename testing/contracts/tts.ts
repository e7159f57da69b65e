/**
 * The text-to-speech contract (processors/services.ts `TTSService`) as checks any TTS plugin,
 * ours or a third party's, runs against itself (pointed at its vendor or at a fake of it).
 */
import { rms } from '../../core/audio.ts';
import type { TTSEvent, TTSRequest, TTSService } from '../../processors/services.ts';
import { CONTRACT_DEFAULTS, describe, ensure, ensureAuthFailure, isAbort, within, type ContractCheck } from './check.ts';

export interface TTSContractSubject {
  create(): TTSService | Promise<TTSService>;
  /** Text to speak (default: a two-sentence line). */
  readonly text?: string;
  readonly language?: string;
  readonly voiceId?: string;
  /** Output rates the pipeline may ask for; the audio must come at the requested one. */
  readonly sampleRates?: readonly number[];
  readonly refused?: () => TTSService | Promise<TTSService>;
  readonly timeoutMs?: number;
}

const DEFAULT_TEXT = 'Hello there. This is a test of speech synthesis.';

async function synthesize(service: TTSService, request: TTSRequest, timeoutMs: number): Promise<TTSEvent[]> {
  const events: TTSEvent[] = [];
  await within(
    (async () => {
      for await (const e of service.synthesize(request)) events.push(e);
    })(),
    timeoutMs,
    `${service.name}: synthesis of "${request.text}"`,
  );
  return events;
}

const audioMs = (events: readonly TTSEvent[]) =>
  events.reduce((ms, e) => (e.type === 'audio' ? ms + (e.pcm.length / e.sampleRate) * 1000 : ms), 0);

export function ttsContract(subject: TTSContractSubject): ContractCheck[] {
  const timeoutMs = subject.timeoutMs ?? CONTRACT_DEFAULTS.timeoutMs;
  const text = subject.text ?? DEFAULT_TEXT;
  const rates = subject.sampleRates ?? [16_000, 24_000];
  const request = (sampleRate: number, signal?: AbortSignal): TTSRequest => ({ text, language: subject.language, voiceId: subject.voiceId, sampleRate, signal });
  const checks: ContractCheck[] = [
    {
      name: 'tts: audible int16 audio at the requested sample rate, of a plausible length',
      async run() {
        const service = await subject.create();
        const lengths: number[] = [];
        for (const rate of rates) {
          const events = await synthesize(service, request(rate), timeoutMs);
          const audio = events.flatMap((e) => (e.type === 'audio' ? [e] : []));
          ensure(audio.length > 0, `${service.name}: no audio at ${rate} Hz`);
          for (const a of audio) {
            ensure(a.pcm instanceof Int16Array, `${service.name}: audio is not an Int16Array`);
            ensure(a.sampleRate === rate, `${service.name}: asked for ${rate} Hz, got ${a.sampleRate} Hz`);
          }
          const all = new Int16Array(audio.reduce((n, a) => n + a.pcm.length, 0));
          audio.reduce((at, a) => (all.set(a.pcm, at), at + a.pcm.length), 0);
          ensure(rms(all) > 0.005, `${service.name}: the audio at ${rate} Hz is silent`);
          const ms = audioMs(events);
          // Speech runs at roughly 2-6 words a second: far outside that is a wrong rate or a cut.
          const words = text.split(/\s+/).filter(Boolean).length;
          ensure(ms >= words * 100 && ms <= words * 1500 + 2000, `${service.name}: ${Math.round(ms)} ms of audio for ${words} words at ${rate} Hz`);
          lengths.push(ms);
        }
        const [shortest, longest] = [Math.min(...lengths), Math.max(...lengths)];
        ensure(longest <= shortest * 1.5, `${service.name}: the same text lasts ${lengths.map(Math.round).join(' / ')} ms at ${rates.join(' / ')} Hz`);
      },
    },
    {
      name: 'tts: word and phoneme timings, when given, are ordered and inside the audio',
      async run() {
        const service = await subject.create();
        const events = await synthesize(service, request(rates[0]!), timeoutMs);
        const total = audioMs(events);
        const spans = events.flatMap((e) =>
          e.type === 'words' ? e.words.map((w) => ({ what: `word "${w.word}"`, startMs: w.startMs, endMs: w.endMs })) : e.type === 'phonemes' ? e.phonemes.map((p) => ({ what: `phoneme ${JSON.stringify(p)}`, startMs: p.startMs, endMs: p.endMs })) : [],
        );
        for (const s of spans) {
          ensure(s.startMs >= 0 && s.endMs >= s.startMs, `${service.name}: ${s.what} has a bad span`);
          // A few ms of slack: providers round timings to their own frame size.
          ensure(s.endMs <= total + 50, `${service.name}: ${s.what} ends at ${s.endMs} ms, after the audio (${Math.round(total)} ms)`);
        }
        const words = events.flatMap((e) => (e.type === 'words' ? e.words : []));
        for (let i = 1; i < words.length; i++) ensure(words[i]!.startMs >= words[i - 1]!.startMs, `${service.name}: words out of order at ${i}`);
      },
    },
    {
      name: 'tts: an abort mid-synthesis stops it with an abort, not a provider error',
      async run() {
        const service = await subject.create();
        const controller = new AbortController();
        let failure: unknown;
        let afterAbort = 0;
        try {
          await within(
            (async () => {
              for await (const e of service.synthesize(request(rates[0]!, controller.signal))) {
                if (controller.signal.aborted) afterAbort++;
                if (e.type === 'audio') controller.abort();
              }
            })(),
            timeoutMs,
            `${service.name}: synthesis to stop after abort`,
          );
        } catch (err) {
          failure = err;
        }
        ensure(controller.signal.aborted, `${service.name}: no audio arrived to abort after`);
        ensure(failure === undefined || isAbort(failure, controller.signal), `${service.name}: an abort surfaced as ${describe(failure)}`);
        // What was already decoded may still come out, but not the rest of the sentence.
        const whole = (await synthesize(service, request(rates[0]!), timeoutMs)).length;
        ensure(whole <= 2 || afterAbort < whole - 1, `${service.name}: ${afterAbort} of ${whole} events still came after the abort`);
      },
    },
  ];
  if (subject.refused) {
    const refused = subject.refused;
    checks.push({
      name: 'tts: a refused key fails with ProviderError auth_failed, not retryable',
      async run() {
        const service = await refused();
        let failure: unknown;
        try {
          await synthesize(service, request(rates[0]!), timeoutMs);
        } catch (err) {
          failure = err;
        }
        ensure(failure !== undefined, `${service.name}: a refused key was accepted`);
        ensureAuthFailure(failure, service.name);
      },
    });
  }
  return checks;
}
