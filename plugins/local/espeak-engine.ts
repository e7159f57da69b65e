/**
 * Main-thread client of the eSpeak-NG worker threads (espeak-worker.mjs): each worker serves its
 * requests one at a time in arrival order, audio is streamed back chunk by chunk, and an abort
 * goes through a shared flag so a barge-in stops synthesis mid-sentence rather than after it.
 */
import { abortError } from '../../core/clock.ts';
import { EngineWorker } from './engine-worker.ts';
import { LocalEngineError, type LocalEngineErrorCode } from './local-engine-error.ts';
import { resolveOptions } from '../../core/options.ts';

/** eSpeak-NG synthesises at this rate whatever the voice. */
export const ESPEAK_SAMPLE_RATE = 22050;

export type EspeakEventType =
  | 'list_terminated' | 'word' | 'sentence' | 'mark' | 'play' | 'end' | 'msg_terminated' | 'phoneme' | 'samplerate';

/** One espeak event as the emscripten binding reports it. */
export interface EspeakEvent {
  readonly type: EspeakEventType;
  /** 1-based code-point index into the synthesised text. */
  readonly text_position: number;
  /** Code points of the word (word events). */
  readonly word_length: number;
  /** Milliseconds from the start of the audio of this request. */
  readonly audio_position: number;
  /** Word/sentence number, or the phoneme (IPA) / mark name. */
  readonly id?: string | number;
}

export interface EspeakChunk {
  readonly pcm: Int16Array;
  readonly events: readonly EspeakEvent[];
}

export interface EspeakVoice {
  readonly name: string;
  readonly identifier: string;
  readonly languages: ReadonlyArray<{ readonly priority: number; readonly name: string }>;
}

export interface EspeakSynthesisOptions {
  /** espeak voice name (`en-us`, `fr`, `de`, `en-us+f3`, ...). */
  readonly voice: string;
  /** Words per minute. */
  readonly rate: number;
  /** 0-100. */
  readonly pitch: number;
  readonly signal?: AbortSignal;
}

type WorkerReply =
  | { type: 'chunk'; id: number; pcm: Int16Array; events: EspeakEvent[] }
  | { type: 'done'; id: number; aborted: boolean }
  | { type: 'voices'; id: number; voices: EspeakVoice[] }
  | { type: 'error'; id: number; code: LocalEngineErrorCode; message: string };

type Handler = (reply: WorkerReply | { type: 'crash'; error: Error }) => void;

/** Abort slots shared with the workers; ids are reused modulo this many. */
const ABORT_SLOTS = 256;

export const ESPEAK_ENGINE_DEFAULTS = {
  /**
   * Worker threads (each ~56 MB, each synthesising one text at a time). One serves a handful of
   * sessions: a sentence takes 20-100 ms to synthesise. Requests go to the least busy worker.
   */
  workers: 1,
} as const;

export interface EspeakEngineOptions {
  readonly workers?: number;
}

/** One worker thread and the requests it is serving. */
class EspeakWorkerSlot {
  readonly handlers = new Map<number, Handler>();
  private readonly worker: EngineWorker<WorkerReply>;

  constructor(abortBuffer: SharedArrayBuffer) {
    this.worker = new EngineWorker<WorkerReply>({
      name: 'espeak-ng',
      url: new URL('./espeak-worker.mjs', import.meta.url),
      workerData: () => ({ abortBuffer }),
      onReply: (reply) => this.handlers.get(reply.id)?.(reply),
      onStop: (error) => {
        for (const handler of [...this.handlers.values()]) handler({ type: 'crash', error });
      },
      busy: () => this.handlers.size > 0,
    });
  }

  /** Sends a request; `handler` receives every reply for `id` until it is released. */
  async send(id: number, message: Record<string, unknown>, handler: Handler): Promise<void> {
    this.handlers.set(id, handler);
    try {
      await this.worker.post({ ...message, id });
    } catch (err) {
      this.release(id);
      throw err;
    }
  }

  release(id: number): void {
    this.handlers.delete(id);
    this.worker.letGo();
  }

  start(): Promise<void> {
    return this.worker.start();
  }

  close(): Promise<void> {
    return this.worker.close();
  }
}

export class EspeakEngine {
  private readonly slots: EspeakWorkerSlot[];
  private readonly abortSlots = new Int32Array(new SharedArrayBuffer(ABORT_SLOTS * 4));
  private nextId = 1;

  constructor(options: EspeakEngineOptions = {}) {
    const { workers } = resolveOptions(ESPEAK_ENGINE_DEFAULTS, options);
    if (!Number.isInteger(workers) || workers < 1 || workers > 64) {
      throw new LocalEngineError('invalid_options', `workers must be an integer within 1-64, got ${workers}`);
    }
    this.slots = Array.from({ length: workers }, () => new EspeakWorkerSlot(this.abortSlots.buffer as SharedArrayBuffer));
  }

  /** Streams the audio and events of `text` (already escaped: see escapeForEspeak). */
  async *synthesize(text: string, options: EspeakSynthesisOptions): AsyncGenerator<EspeakChunk> {
    const { signal } = options;
    if (signal?.aborted) throw abortError(signal.reason);
    const id = this.nextId++;
    const slot = this.leastBusy();
    const queue: Array<WorkerReply | { type: 'crash'; error: Error }> = [];
    let wake: (() => void) | undefined;
    const onAbort = () => {
      Atomics.store(this.abortSlots, id % ABORT_SLOTS, id);
      wake?.();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await slot.send(id, { type: 'synthesize', text, voice: options.voice, rate: options.rate, pitch: options.pitch }, (reply) => {
        queue.push(reply);
        wake?.();
      });
      for (;;) {
        if (signal?.aborted) throw abortError(signal.reason);
        const reply = queue.shift();
        if (!reply) {
          await new Promise<void>((resolve) => (wake = resolve));
          wake = undefined;
          continue;
        }
        if (reply.type === 'chunk') yield { pcm: reply.pcm, events: reply.events };
        else if (reply.type === 'done') return;
        else if (reply.type === 'error') throw new LocalEngineError(reply.code, reply.message, { voice: options.voice });
        else if (reply.type === 'crash') throw reply.error;
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      // A consumer that stops early (break, abort) must also stop the worker's synthesis.
      Atomics.store(this.abortSlots, id % ABORT_SLOTS, id);
      slot.release(id);
    }
  }

  /** Every voice the bundled espeak-ng data provides. */
  async voices(): Promise<EspeakVoice[]> {
    const id = this.nextId++;
    const slot = this.leastBusy();
    return new Promise<EspeakVoice[]>((resolve, reject) => {
      const settle = (reply: WorkerReply | { type: 'crash'; error: Error }) => {
        slot.release(id);
        if (reply.type === 'voices') resolve(reply.voices);
        else if (reply.type === 'crash') reject(reply.error);
        else if (reply.type === 'error') reject(new LocalEngineError(reply.code, reply.message));
      };
      slot.send(id, { type: 'voices' }, settle).catch(reject);
    });
  }

  /** Starts every worker and loads the voice data (200-650 ms, once); synthesis calls it anyway. */
  async start(): Promise<void> {
    await Promise.all(this.slots.map((slot) => slot.start()));
  }

  async close(): Promise<void> {
    await Promise.all(this.slots.map((slot) => slot.close()));
  }

  private leastBusy(): EspeakWorkerSlot {
    return this.slots.reduce((best, slot) => (slot.handlers.size < best.handlers.size ? slot : best));
  }
}

let shared: EspeakEngine | undefined;

/**
 * The process-wide engine every `tts:local` uses unless given one (the voice data is 24 MB and a
 * worker serves several sessions). `workers` applies when it is first created.
 */
export function sharedEspeakEngine(options: EspeakEngineOptions = {}): EspeakEngine {
  shared ??= new EspeakEngine(options);
  return shared;
}

/**
 * espeak-ng always parses its input as SSML, so `<`, `>` and `&` in user text would be read as
 * markup. Escapes them and returns, for every code point of the escaped text, the index of the
 * code point of the original text it came from (event text positions refer to the escaped text).
 */
export function escapeForEspeak(text: string): { escaped: string; originalIndex: number[] } {
  const entities: Record<string, string> = { '<': '&lt;', '>': '&gt;', '&': '&amp;' };
  const originalIndex: number[] = [];
  let escaped = '';
  [...text].forEach((ch, i) => {
    const piece = entities[ch] ?? ch;
    escaped += piece;
    for (let k = 0; k < [...piece].length; k++) originalIndex.push(i);
  });
  return { escaped, originalIndex };
}
