/**
 * The speech-to-text contract (processors/services.ts `STTService`) as checks any STT plugin,
 * ours or a third party's, runs against itself (pointed at its vendor or at a fake of it).
 */
import { firstValueFrom, toArray } from 'rxjs';
import type { STTService, STTStreamOptions, TranscriptEvent } from '../../processors/services.ts';
import { CONTRACT_DEFAULTS, ensure, ensureAuthFailure, within, type ContractCheck } from './check.ts';

export interface STTContractSubject {
  /** A fresh service talking to a working provider (or its fake). */
  create(): STTService | Promise<STTService>;
  /** Speech the provider recognises: mono int16 at `sampleRate`, with trailing silence. */
  readonly speech: Int16Array | (() => Promise<Int16Array>);
  readonly sampleRate: number;
  /** What the final transcript of `speech` must contain (case-insensitive). */
  readonly expectedText: string | RegExp;
  readonly language?: string;
  /** A service whose credentials the provider refuses; leaves out the check when absent. */
  readonly refused?: () => STTService | Promise<STTService>;
  readonly timeoutMs?: number;
}

export function sttContract(subject: STTContractSubject): ContractCheck[] {
  const timeoutMs = subject.timeoutMs ?? CONTRACT_DEFAULTS.timeoutMs;
  const options: STTStreamOptions = { language: subject.language ?? 'en', sampleRate: subject.sampleRate, channels: 1, interimResults: true };
  const speech = async () => (typeof subject.speech === 'function' ? subject.speech() : subject.speech);
  const matches = (text: string) =>
    typeof subject.expectedText === 'string' ? text.toLowerCase().includes(subject.expectedText.toLowerCase()) : subject.expectedText.test(text);

  /** Sends the speech in 20 ms chunks, finalizes, closes, and returns every event. */
  async function transcribe(service: STTService): Promise<TranscriptEvent[]> {
    const stream = await within(service.connect(options), timeoutMs, `${service.name}: connect`);
    const events: TranscriptEvent[] = [];
    const finals = new Promise<void>((resolve, reject) => {
      stream.transcripts.subscribe({
        next: (e) => {
          events.push(e);
          if (e.final && matches(e.text)) resolve();
        },
        error: reject,
        complete: () => resolve(),
      });
    });
    const pcm = await speech();
    const chunk = Math.round(subject.sampleRate / 50);
    for (let i = 0; i < pcm.length; i += chunk) {
      stream.sendAudio(pcm.subarray(i, i + chunk));
      await new Promise((r) => setTimeout(r, 1));
    }
    stream.finalize();
    await within(finals, timeoutMs, `${service.name}: a final transcript matching ${String(subject.expectedText)}`);
    await within(stream.close(), timeoutMs, `${service.name}: close`);
    return events;
  }

  const checks: ContractCheck[] = [
    {
      name: 'stt: speech in, a final transcript of it out',
      async run() {
        const service = await subject.create();
        const events = await transcribe(service);
        const finals = events.filter((e) => e.final);
        ensure(finals.some((e) => matches(e.text)), `${service.name}: no final transcript contains ${String(subject.expectedText)}: ${JSON.stringify(events)}`);
      },
    },
    {
      name: 'stt: every event has text; timings, when given, are ordered and not negative',
      async run() {
        const service = await subject.create();
        const events = await transcribe(service);
        ensure(events.length > 0, `${service.name}: no transcript events`);
        for (const e of events) {
          ensure(typeof e.text === 'string' && typeof e.final === 'boolean', `${service.name}: malformed event ${JSON.stringify(e)}`);
          if (e.startMs !== undefined) ensure(e.startMs >= 0, `${service.name}: negative startMs in ${JSON.stringify(e)}`);
          if (e.startMs !== undefined && e.endMs !== undefined) ensure(e.endMs >= e.startMs, `${service.name}: endMs before startMs in ${JSON.stringify(e)}`);
          if (e.confidence !== undefined) ensure(e.confidence >= 0 && e.confidence <= 1, `${service.name}: confidence out of [0, 1]`);
        }
      },
    },
    {
      name: 'stt: closing a connection completes its transcripts (a normal close is not an error)',
      async run() {
        const service = await subject.create();
        const stream = await within(service.connect(options), timeoutMs, `${service.name}: connect`);
        const all = firstValueFrom(stream.transcripts.pipe(toArray()));
        await within(stream.close(), timeoutMs, `${service.name}: close`);
        await within(all, timeoutMs, `${service.name}: transcripts to complete after close`);
      },
    },
  ];
  if (subject.refused) {
    const refused = subject.refused;
    checks.push({
      name: 'stt: a refused key fails with ProviderError auth_failed, not retryable',
      async run() {
        const service = await refused();
        let failure: unknown;
        try {
          const stream = await within(service.connect(options), timeoutMs, `${service.name}: connect with a refused key`);
          // A provider may accept the socket and refuse on the first audio instead.
          stream.sendAudio(new Int16Array(subject.sampleRate / 50));
          await within(firstValueFrom(stream.transcripts.pipe(toArray())), timeoutMs, `${service.name}: the refusal`);
          await stream.close();
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
