/**
 * The speech-to-speech contract (processors/s2s/s2s-service.ts `S2SService`) as checks any S2S
 * plugin, ours or a third party's, runs against itself (pointed at its vendor or at a fake).
 */
import type { S2SConnectOptions, S2SConnection, S2SEvent, S2SService } from '../../processors/s2s/s2s-service.ts';
import { holdsWithin } from '../until.ts';
import { CONTRACT_DEFAULTS, ensure, ensureAuthFailure, within, type ContractCheck } from './check.ts';

export interface S2SContractSubject {
  create(): S2SService | Promise<S2SService>;
  /** Options of a conversation the provider accepts (key, config id, ...). */
  readonly connect: Omit<S2SConnectOptions, 'signal' | 'allowInterruptions'> & { readonly allowInterruptions?: boolean };
  /**
   * User speech the provider answers with a bot turn, at `rate` (mono int16, with trailing
   * silence so the provider's turn detection ends the user turn).
   */
  userSpeech(rate: number): Int16Array;
  /** The API key the provider refuses; leaves out the check when absent. */
  readonly refusedApiKey?: string;
  readonly timeoutMs?: number;
}

async function open(service: S2SService, options: S2SConnectOptions, timeoutMs: number): Promise<{ connection: S2SConnection; events: S2SEvent[]; failed: () => unknown; completed: () => boolean }> {
  const connection = await within(service.connect(options), timeoutMs, `${service.name}: connect`);
  const events: S2SEvent[] = [];
  let failure: unknown;
  let done = false;
  connection.events.subscribe({ next: (e) => events.push(e), error: (err) => (failure = err), complete: () => (done = true) });
  return { connection, events, failed: () => failure, completed: () => done };
}

export function s2sContract(subject: S2SContractSubject): ContractCheck[] {
  const timeoutMs = subject.timeoutMs ?? CONTRACT_DEFAULTS.timeoutMs;
  // Read when a check runs: a subject may only know its key once its fake has started.
  const options = (): S2SConnectOptions => ({ allowInterruptions: true, ...subject.connect });
  const checks: ContractCheck[] = [
    {
      // Our plugins emit `ready` before connect() resolves (a subscriber cannot see it): a
      // resolved connect() is what means ready. A `ready` seen later must agree with it.
      name: 's2s: connect resolves with a connection that takes audio at a positive rate; a later ready agrees',
      async run() {
        const service = await subject.create();
        const { connection, events, failed } = await open(service, options(), timeoutMs);
        try {
          ensure(Number.isInteger(connection.inputSampleRate) && connection.inputSampleRate > 0, `${service.name}: input rate ${connection.inputSampleRate}`);
          connection.sendAudio(new Int16Array(Math.round(connection.inputSampleRate / 50)));
          await new Promise((r) => setTimeout(r, 100));
          ensure(failed() === undefined, `${service.name}: failed after connect: ${String(failed())}`);
          for (const e of events) {
            if (e.type === 'ready') ensure(e.inputSampleRate === connection.inputSampleRate && e.outputSampleRate > 0, `${service.name}: ready disagrees: ${JSON.stringify(e)}`);
          }
        } finally {
          await connection.close();
        }
      },
    },
    {
      name: 's2s: user speech gets a bot turn: started, audio of that turn at one rate, ended, in order',
      async run() {
        const service = await subject.create();
        const { connection, events, failed } = await open(service, options(), timeoutMs);
        try {
          const pcm = subject.userSpeech(connection.inputSampleRate);
          const chunk = Math.round(connection.inputSampleRate / 50);
          for (let i = 0; i < pcm.length; i += chunk) {
            connection.sendAudio(pcm.subarray(i, i + chunk));
            await new Promise((r) => setTimeout(r, 2));
          }
          // Waits in real time for the provider; not in time is a ContractViolation.
          ensure(await holdsWithin(() => events.some((e) => e.type === 'bot-turn-ended') || failed() !== undefined, { timeoutMs }), `${service.name}: a whole bot turn did not happen within ${timeoutMs} ms`);
          ensure(failed() === undefined, `${service.name}: failed: ${String(failed())}`);
          const started = events.findIndex((e) => e.type === 'bot-turn-started');
          const ended = events.findIndex((e) => e.type === 'bot-turn-ended');
          ensure(started >= 0 && started < ended, `${service.name}: bot-turn-started must come before bot-turn-ended`);
          const turn = events[started]!.type === 'bot-turn-started' ? (events[started] as Extract<S2SEvent, { type: 'bot-turn-started' }>).turn.turnId : '';
          const audio = events.slice(started, ended).flatMap((e) => (e.type === 'bot-audio' ? [e] : []));
          ensure(audio.length > 0, `${service.name}: no audio in the bot turn`);
          for (const a of audio) {
            ensure(a.turn.turnId === turn, `${service.name}: audio of turn ${a.turn.turnId} inside turn ${turn}`);
            ensure(a.sampleRate > 0 && a.sampleRate === audio[0]!.sampleRate, `${service.name}: audio rates vary within a turn (${a.sampleRate} / ${audio[0]!.sampleRate} Hz)`);
            ensure(a.pcm instanceof Int16Array && a.pcm.length > 0, `${service.name}: empty or non-int16 audio`);
          }
          const ending = events[ended] as Extract<S2SEvent, { type: 'bot-turn-ended' }>;
          ensure(ending.turn.turnId === turn, `${service.name}: the turn that ended is not the one that started`);
        } finally {
          await connection.close();
        }
      },
    },
    {
      name: 's2s: closing a conversation completes its events (a normal close is not an error)',
      async run() {
        const service = await subject.create();
        const { connection, failed, completed } = await open(service, options(), timeoutMs);
        await within(connection.close(), timeoutMs, `${service.name}: close`);
        ensure(await holdsWithin(() => completed() || failed() !== undefined, { timeoutMs }), `${service.name}: events to complete did not happen within ${timeoutMs} ms`);
        ensure(failed() === undefined, `${service.name}: closing errored the events: ${String(failed())}`);
      },
    },
  ];
  if (subject.refusedApiKey !== undefined) {
    const apiKey = subject.refusedApiKey;
    checks.push({
      name: 's2s: a refused key fails with ProviderError auth_failed, not retryable',
      async run() {
        const service = await subject.create();
        let failure: unknown;
        try {
          const { connection, failed } = await open(service, { ...options(), apiKey }, timeoutMs);
          ensure(await holdsWithin(() => failed() !== undefined, { timeoutMs }), `${service.name}: the refusal did not happen within ${timeoutMs} ms`);
          failure = failed();
          await connection.close();
        } catch (err) {
          failure = err;
        }
        ensureAuthFailure(failure, service.name);
      },
    });
  }
  return checks;
}
