/**
 * One Deepgram speak WebSocket (`/v1/speak`, `@deepgram/sdk` `speak.v1`), shared by the sentences
 * of a session one at a time: `Speak {text}` + `Flush`, binary linear16 frames, `Flushed`. An
 * interrupted sentence sends `Clear`; audio still arriving until `Cleared` belongs to it and is
 * dropped, so it never leaks into the next sentence.
 *
 * The SDK hands binary frames over as `Blob`s (read asynchronously): messages are handled through
 * one promise chain, so audio and the `Flushed` after it keep their order.
 */
import type { DeepgramClient } from '@deepgram/sdk';
import { abortError } from '../../core/clock.ts';
import { DeepgramTTSError, speakHandshakeError } from './errors.ts';

type SpeakSocket = Awaited<ReturnType<DeepgramClient['speak']['v1']['connect']>>;

type PieceEvent = { audio: Uint8Array } | { done: true } | { error: Error };

class Piece {
  private readonly queue: PieceEvent[] = [];
  private wake: (() => void) | undefined;

  put(event: PieceEvent): void {
    this.queue.push(event);
    this.wake?.();
  }

  async next(): Promise<PieceEvent> {
    while (!this.queue.length) await new Promise<void>((resolve) => (this.wake = resolve));
    this.wake = undefined;
    return this.queue.shift()!;
  }
}

const ABORTED = 'speech synthesis aborted';

/** Deepgram processes at most 20 Flush messages per 60 s (its docs); past that, a Warning and no audio. */
export const FLUSH_LIMIT = { count: 20, windowMs: 60_000 } as const;

export class SpeakConnection {
  private state: 'connecting' | 'open' | 'closing' | 'closed' = 'connecting';
  private current: Piece | undefined;
  /** Set between our Clear and Deepgram's Cleared. */
  private clearing: { done: Promise<void>; resolve: () => void } | undefined;
  private chain: Promise<void> = Promise.resolve();
  private lastError: string | undefined;
  private connectAborted = false;
  private settleOpen!: (err?: Error) => void;
  private readonly openPromise: Promise<void>;
  /** When each Flush went out (within the last window). */
  private readonly flushes: number[] = [];

  constructor(
    private readonly socket: SpeakSocket,
    readonly model: string,
    readonly sampleRate: number,
    private readonly clearTimeoutMs: number,
  ) {
    this.openPromise = new Promise<void>((resolve, reject) => (this.settleOpen = (err) => (err ? reject(err) : resolve())));
    this.openPromise.catch(() => undefined);
    socket.on('open', () => {
      if (this.state !== 'connecting') return;
      this.state = 'open';
      this.settleOpen();
    });
    socket.on('message', (m: unknown) => {
      this.chain = this.chain.then(() => this.onMessage(m)).catch((err) => this.fail(new DeepgramTTSError('invalid_response', `could not read a Deepgram speak frame: ${(err as Error).message}`)));
    });
    socket.on('error', (e) => (this.lastError = e.message));
    // The SDK reports a refused handshake as close-then-error: decide once both have arrived.
    socket.on('close', (e) => queueMicrotask(() => this.onClose(e.code, e.reason)));
  }

  /**
   * Open, and with a Flush left in Deepgram's window: a chatty bot says more than 20 sentences a
   * minute, and the limit is counted per connection (as we read it), so the 21st sentence goes
   * on a fresh socket instead of being refused.
   */
  get usable(): boolean {
    const now = Date.now();
    while (this.flushes.length && now - this.flushes[0]! >= FLUSH_LIMIT.windowMs) this.flushes.shift();
    return (this.state === 'open' || this.state === 'connecting') && this.flushes.length < FLUSH_LIMIT.count;
  }

  async opened(signal?: AbortSignal): Promise<void> {
    const onAbort = () => {
      this.connectAborted = true;
      this.socket.close();
    };
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await this.openPromise;
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Speaks `text`: its audio bytes as they arrive; ends at `Flushed`. */
  async *speak(text: string, signal?: AbortSignal): AsyncIterable<Uint8Array> {
    if (this.clearing) await this.waitForClear();
    if (this.state !== 'open') throw new DeepgramTTSError('connection_lost', 'the Deepgram speak connection is closed');
    const piece = new Piece();
    this.current = piece;
    const onAbort = () => {
      if (this.current === piece) this.clear();
      piece.put({ error: abortError(ABORTED) });
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      this.socket.sendText({ type: 'Speak', text });
      this.socket.sendFlush({ type: 'Flush' });
      this.flushes.push(Date.now());
      for (;;) {
        const event = await piece.next();
        if ('error' in event) throw event.error;
        if ('done' in event) {
          if (this.current === piece) this.current = undefined;
          return;
        }
        yield event.audio;
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      // Left early (an abort, or the consumer stopped): the rest of this sentence is not wanted.
      if (this.current === piece) this.clear();
    }
  }

  close(): void {
    if (this.state === 'closed' || this.state === 'closing') return;
    const wasOpen = this.state === 'open';
    this.state = 'closing';
    try {
      if (wasOpen) this.socket.sendClose({ type: 'Close' });
    } catch {
      // already gone
    }
    this.socket.close();
  }

  /** Tells Deepgram to drop the current sentence; its late audio is ignored until Cleared. */
  private clear(): void {
    this.current = undefined;
    if (this.state !== 'open' || this.clearing) return;
    let resolve!: () => void;
    const done = new Promise<void>((r) => (resolve = r));
    this.clearing = { done, resolve };
    try {
      this.socket.sendClear({ type: 'Clear' });
    } catch {
      this.clearing = undefined;
    }
  }

  /**
   * Waits for a Clear under way to be confirmed (at most `clearTimeoutMs`; sooner when `signal`
   * aborts): true when this socket can take the next sentence, false when it cannot (not
   * confirmed in time: it was failed, and the caller should open a fresh one).
   */
  async settled(signal?: AbortSignal): Promise<boolean> {
    if (this.clearing) await this.waitForClear(signal);
    return this.state === 'open' || this.state === 'connecting';
  }

  private async waitForClear(signal?: AbortSignal): Promise<void> {
    const clearing = this.clearing!;
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<'aborted'>((r) => {
      onAbort = () => r('aborted');
      if (signal?.aborted) onAbort();
      else signal?.addEventListener('abort', onAbort, { once: true });
    });
    const outcome = await Promise.race([clearing.done.then(() => true), new Promise<boolean>((r) => (timer = setTimeout(() => r(false), this.clearTimeoutMs))), aborted]);
    clearTimeout(timer);
    if (onAbort) signal?.removeEventListener('abort', onAbort);
    if (outcome === 'aborted') return;
    const cleared = outcome;
    // No Cleared in time: this socket may still carry the old sentence; a fresh one is cleaner.
    if (!cleared) this.fail(new DeepgramTTSError('timeout', `Deepgram did not confirm Clear within ${this.clearTimeoutMs} ms`));
  }

  private async onMessage(m: unknown): Promise<void> {
    const bytes = await binaryOf(m);
    if (bytes) {
      if (!this.clearing) this.current?.put({ audio: bytes });
      return;
    }
    const message = typeof m === 'object' && m !== null ? (m as { type?: unknown; description?: string; code?: string }) : undefined;
    if (!message || typeof message.type !== 'string') {
      return this.fail(new DeepgramTTSError('invalid_response', `Deepgram sent a speak message that is not JSON: ${JSON.stringify(String(m).slice(0, 80))}`));
    }
    switch (message.type) {
      case 'Flushed':
        if (!this.clearing) this.current?.put({ done: true });
        return;
      case 'Cleared':
        this.clearing?.resolve();
        this.clearing = undefined;
        return;
      case 'Warning':
        // A Flush over Deepgram's limit is not processed: no Flushed will come for that sentence.
        if (/flush/i.test(`${message.code} ${message.description}`)) this.current?.put({ error: new DeepgramTTSError('rate_limited', `Deepgram refused the flush: ${message.description}`) });
        return;
      case 'Error':
        return this.fail(new DeepgramTTSError('provider_error', `Deepgram reported an error: ${message.description ?? JSON.stringify(message)}`));
      default:
        return; // Metadata, and message types added later
    }
  }

  private fail(err: Error): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    this.clearing?.resolve();
    this.clearing = undefined;
    this.current?.put({ error: err });
    this.current = undefined;
    this.socket.close();
  }

  private onClose(code: number, reason: string): void {
    const was = this.state;
    this.state = 'closed';
    this.clearing?.resolve();
    this.clearing = undefined;
    if (was === 'connecting') {
      this.settleOpen(this.connectAborted ? abortError('Deepgram speak connect aborted') : speakHandshakeError(this.lastError ?? `closed with ${code}`));
      return;
    }
    if (was === 'closed' || was === 'closing') return;
    const detail = [reason, this.lastError].filter(Boolean).join('; ');
    this.current?.put({ error: new DeepgramTTSError('connection_lost', `the Deepgram speak connection closed unexpectedly (code ${code}${detail ? `: ${detail}` : ''})`, code) });
    this.current = undefined;
  }
}

async function binaryOf(m: unknown): Promise<Uint8Array | undefined> {
  if (typeof Blob !== 'undefined' && m instanceof Blob) return new Uint8Array(await m.arrayBuffer());
  if (m instanceof ArrayBuffer) return new Uint8Array(m);
  if (ArrayBuffer.isView(m)) return new Uint8Array(m.buffer, m.byteOffset, m.byteLength);
  return undefined;
}
