/**
 * One Cartesia TTS WebSocket (`wss://<base>/tts/websocket`) through the official SDK's `TTSWS`,
 * with one context per sentence. What the SDK gives: the URL, auth (`Authorization: Bearer`) and
 * `Cartesia-Version` headers, JSON framing and base64 audio decoding (`event.audio`). What it
 * lacks, added here (docs/vendors.md, "Cartesia"):
 *
 * - its ES module build calls `require('ws')`, which does not exist in an ES module, so on Node it
 *   always refuses to open a socket: the CommonJS build is loaded instead (createRequire);
 * - `client.tts.websocket()` connects before an `error` listener can be attached, so a refused
 *   handshake also surfaces as an unhandled rejection: `TTSWS` is built here with the listener first;
 * - its `generate()` / context `receive()` never end when the socket drops, and its `send()`
 *   silently opens a new socket after a close (losing every context): this class watches the
 *   socket's close itself and never sends on a closed one; the service opens a fresh connection.
 */
import { createRequire } from 'node:module';
import { abortError } from '../../core/clock.ts';
import { CartesiaTTSError, generationError, handshakeError } from './errors.ts';

const require = createRequire(import.meta.url);
const { Cartesia } = require('@cartesia/cartesia-js') as typeof import('@cartesia/cartesia-js');
const { TTSWS } = require('@cartesia/cartesia-js/resources/tts/ws') as typeof import('@cartesia/cartesia-js/resources/tts/ws');

type Socket = InstanceType<typeof TTSWS>;

/** What a sentence's context receives, in order. */
export type ContextEvent =
  | { readonly type: 'audio'; readonly bytes: Uint8Array }
  | { readonly type: 'words'; readonly words: unknown }
  | { readonly type: 'phonemes'; readonly phonemes: unknown }
  | { readonly type: 'done' }
  | { readonly type: 'error'; readonly error: Error };

class ContextQueue {
  private readonly queue: ContextEvent[] = [];
  private wake: (() => void) | undefined;

  put(event: ContextEvent): void {
    this.queue.push(event);
    this.wake?.();
  }

  async next(): Promise<ContextEvent> {
    while (!this.queue.length) await new Promise<void>((resolve) => (this.wake = resolve));
    this.wake = undefined;
    return this.queue.shift()!;
  }
}

export interface CartesiaConnectionOptions {
  readonly apiKey: string;
  readonly baseUrl: string;
  readonly connectTimeoutMs: number;
  readonly ca?: string | Buffer;
}

const OPEN = 1;

export class CartesiaConnection {
  private readonly contexts = new Map<string, ContextQueue>();
  /** Contexts cancelled lately (an interruption): their late errors concern no sentence now. */
  private readonly cancelled = new Set<string>();
  private closed = false;

  static async open(options: CartesiaConnectionOptions, signal?: AbortSignal): Promise<CartesiaConnection> {
    const client = new Cartesia({ apiKey: options.apiKey, baseURL: options.baseUrl, maxRetries: 0 });
    const ws = new TTSWS(client, { handshakeTimeout: options.connectTimeoutMs, ...(options.ca ? { ca: options.ca } : {}) });
    const connection = new CartesiaConnection(ws);
    const onAbort = () => ws.socket.close();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await ws.connect();
    } catch (err) {
      connection.closed = true;
      if (signal?.aborted) throw abortError('Cartesia connect aborted');
      const message = (err as { message?: string })?.message ?? String(err);
      throw handshakeError(message);
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
    return connection;
  }

  private constructor(private readonly ws: Socket) {
    // Listeners before anything can fail: the SDK rejects a promise nobody holds when none is there.
    ws.on('error', (err) => {
      if (/could not parse websocket event/.test(err.message)) {
        this.failAll(new CartesiaTTSError('invalid_response', 'Cartesia sent a message that is not JSON'));
        this.close();
      }
      // Socket errors are followed by its close, handled there.
    });
    ws.on('event', (event) => this.route(event as unknown as Record<string, any>));
    ws.socket.addEventListener('close', (e: { code?: number; reason?: string }) => {
      if (this.closed) return;
      this.closed = true;
      this.failAll(new CartesiaTTSError('connection_lost', `the Cartesia connection closed unexpectedly (code ${e.code ?? 'none'}${e.reason ? `: ${e.reason}` : ''})`, e.code));
    });
  }

  get usable(): boolean {
    return !this.closed && this.ws.socket.readyState === OPEN;
  }

  /** Starts a context with `request` (its `context_id` included) and yields its events until `done`. */
  async *generate(request: Record<string, unknown> & { context_id: string }, signal?: AbortSignal): AsyncIterable<ContextEvent> {
    if (!this.usable) throw new CartesiaTTSError('connection_lost', 'the Cartesia connection is closed');
    const id = request.context_id;
    const queue = new ContextQueue();
    this.contexts.set(id, queue);
    let finished = false;
    const onAbort = () => queue.put({ type: 'error', error: abortError('speech synthesis aborted') });
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      this.send(request);
      for (;;) {
        const event = await queue.next();
        if (event.type === 'error') throw event.error;
        if (event.type === 'done') {
          finished = true;
          return;
        }
        yield event;
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      this.contexts.delete(id);
      // Left before done (an interruption): Cartesia is told to stop generating it.
      if (!finished) {
        this.send({ context_id: id, cancel: true });
        this.cancelled.add(id);
        // The last few are enough: late messages follow their cancel within moments.
        if (this.cancelled.size > 32) this.cancelled.delete(this.cancelled.values().next().value!);
      }
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.failAll(new CartesiaTTSError('connection_lost', 'the Cartesia connection was closed'));
    this.ws.close({ code: 1000, reason: 'done' });
  }

  /** Never on a closed socket: the SDK would open a new one behind our back. */
  private send(message: Record<string, unknown>): void {
    if (!this.usable) return;
    void this.ws.send(message as never);
  }

  private route(event: Record<string, any>): void {
    const queue = typeof event.context_id === 'string' ? this.contexts.get(event.context_id) : undefined;
    if (event.type === 'error' && !queue) {
      // The late error of a context already cancelled (an interruption) concerns nobody now: it
      // must not fail the sentence that followed it.
      if (typeof event.context_id === 'string' && this.cancelled.has(event.context_id)) return;
      // An error for no live context (a refused message, the connection itself): every sentence in flight fails.
      return this.failAll(generationError(event));
    }
    if (!queue) return; // a cancelled context's late messages
    switch (event.type) {
      case 'chunk':
        if (event.audio instanceof Uint8Array) queue.put({ type: 'audio', bytes: event.audio });
        else queue.put({ type: 'error', error: new CartesiaTTSError('invalid_response', 'Cartesia sent an audio chunk without data') });
        break;
      case 'timestamps':
        queue.put({ type: 'words', words: event.word_timestamps });
        break;
      case 'phoneme_timestamps':
        queue.put({ type: 'phonemes', phonemes: event.phoneme_timestamps });
        break;
      case 'error':
        queue.put({ type: 'error', error: generationError(event) });
        break;
      default:
        break;
    }
    if (event.done === true && event.type !== 'error') queue.put({ type: 'done' });
  }

  private failAll(error: Error): void {
    for (const queue of this.contexts.values()) queue.put({ type: 'error', error });
  }
}
