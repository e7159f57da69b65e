/**
 * `STTService` over Deepgram's live transcription WebSocket (listen v1), through the official
 * `@deepgram/sdk` v5. Audio goes out as linear16 at the pipeline's sample rate; `Results` and
 * `UtteranceEnd` come back as `TranscriptEvent`s. The SDK's own reconnecting socket is told not
 * to reconnect: a dropped connection errors `transcripts`, and the STT processor (shared by all
 * vendors) reconnects with backoff and replays the audio Deepgram has not acknowledged.
 */
import { Subject, type Observable } from 'rxjs';
import { DeepgramClient } from '@deepgram/sdk';
import { RealClock, abortError, type Clock, type TimerHandle } from '../../core/clock.ts';
import { resolveOptions, type Resolved } from '../../core/options.ts';
import type { STTService, STTStream, STTStreamOptions, TranscriptEvent } from '../../processors/services.ts';
import { DeepgramSTTError, handshakeError } from './errors.ts';
import { toTranscriptEvent } from './transcripts.ts';

export const DEEPGRAM_STT_DEFAULTS = {
  model: 'nova-3',
  /** WebSocket root; the `baseUrl` option (the SDK's documented `baseUrl`) overrides it. */
  baseUrl: 'wss://api.deepgram.com',
  /** Silence (ms) after which Deepgram finalises with speech_final; `false` disables it. */
  endpointingMs: 300 as number | false,
  /** Word gap (ms) that triggers UtteranceEnd; Deepgram needs interim results for it. */
  utteranceEndMs: 1000,
  punctuate: true,
  smartFormat: false,
  /** Deepgram closes after 10 s without data (NET-0001); its docs advise a KeepAlive every 3-5 s. */
  keepAliveIntervalMs: 4000,
  connectTimeoutMs: 10_000,
  /** How long `close()` waits for Deepgram's final results after CloseStream. */
  closeTimeoutMs: 2000,
} as const;

export interface DeepgramSTTOptions {
  /** Defaults to `DEEPGRAM_API_KEY`. */
  readonly apiKey?: string;
  readonly baseUrl?: string;
  readonly model?: string;
  readonly endpointingMs?: number | false;
  readonly utteranceEndMs?: number;
  readonly punctuate?: boolean;
  readonly smartFormat?: boolean;
  readonly keepAliveIntervalMs?: number;
  readonly connectTimeoutMs?: number;
  readonly closeTimeoutMs?: number;
  /** Time source for keepalives and close timeouts. */
  readonly clock?: Clock;
}

type ListenSocket = Awaited<ReturnType<DeepgramClient['listen']['v1']['connect']>>;
type Settings = Resolved<typeof DEEPGRAM_STT_DEFAULTS>;

export class DeepgramSTTService implements STTService {
  readonly name = 'deepgram';
  readonly model: string;
  private readonly client: DeepgramClient;
  private readonly settings: Settings;
  private readonly clock: Clock;

  constructor(options: DeepgramSTTOptions = {}, env: NodeJS.ProcessEnv = process.env) {
    const apiKey = options.apiKey ?? env.DEEPGRAM_API_KEY;
    if (!apiKey) throw new DeepgramSTTError('key_missing', 'no Deepgram API key: pass the apiKey option or set DEEPGRAM_API_KEY');
    this.settings = resolveOptions(DEEPGRAM_STT_DEFAULTS, options);
    this.model = this.settings.model;
    this.clock = options.clock ?? new RealClock();
    this.client = new DeepgramClient({ apiKey, baseUrl: this.settings.baseUrl });
  }

  async connect(options: STTStreamOptions, signal?: AbortSignal): Promise<STTStream> {
    if (signal?.aborted) throw abortError('Deepgram connect aborted');
    const s = this.settings;
    const socket = await this.client.listen.v1.connect({
      model: options.model ?? this.model,
      language: options.language,
      encoding: 'linear16',
      sample_rate: options.sampleRate,
      channels: options.channels,
      interim_results: String(options.interimResults),
      punctuate: String(s.punctuate),
      smart_format: String(s.smartFormat),
      endpointing: s.endpointingMs === false ? 'false' : s.endpointingMs,
      ...(options.interimResults ? { utterance_end_ms: s.utteranceEndMs } : {}),
      // Reconnecting is the STT processor's job (it knows which audio to replay).
      reconnectAttempts: 0,
      shouldReconnect: () => false,
      connectionTimeoutInSeconds: s.connectTimeoutMs / 1000,
      // `signal` is not handed to the SDK: it aborts the connection attempt, not the session.
    });
    const stream = new DeepgramSTTStream(socket, options.language, this.clock, s);
    socket.connect();
    await stream.opened(signal);
    return stream;
  }
}

type State = 'connecting' | 'open' | 'closing' | 'closed';

class DeepgramSTTStream implements STTStream {
  readonly transcripts: Observable<TranscriptEvent>;
  private readonly subject = new Subject<TranscriptEvent>();
  private state: State = 'connecting';
  private lastError: string | undefined;
  private connectAborted = false;
  private lastSentAt: number;
  private keepAlive: TimerHandle | undefined;
  private settleOpen!: (err?: Error) => void;
  private readonly openPromise: Promise<void>;
  private markClosed!: () => void;
  private readonly closedPromise = new Promise<void>((resolve) => (this.markClosed = resolve));

  constructor(
    private readonly socket: ListenSocket,
    private readonly language: string,
    private readonly clock: Clock,
    private readonly settings: Settings,
  ) {
    this.transcripts = this.subject.asObservable();
    this.lastSentAt = clock.now();
    this.openPromise = new Promise<void>((resolve, reject) => {
      this.settleOpen = (err) => (err ? reject(err) : resolve());
    });
    this.openPromise.catch(() => undefined);
    // The SDK keeps one handler per event: these are the only ones.
    socket.on('open', () => this.onOpen());
    socket.on('message', (m) => {
      const event = toTranscriptEvent(m, this.language);
      if (event) this.subject.next(event);
    });
    socket.on('error', (e) => {
      this.lastError = e.message;
    });
    // The SDK reports a failure as close-then-error; decide after both have arrived.
    socket.on('close', (e) => queueMicrotask(() => this.onClose(e.code, e.reason)));
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

  sendAudio(pcm: Int16Array): void {
    // An empty binary frame means CloseStream to Deepgram; after a drop, `transcripts` has errored.
    if (this.state !== 'open' || pcm.length === 0) return;
    if (this.send(() => this.socket.sendMedia(new Uint8Array(pcm.buffer, pcm.byteOffset, pcm.byteLength)))) this.lastSentAt = this.clock.now();
  }

  finalize(): void {
    if (this.state === 'open') this.send(() => this.socket.sendFinalize({ type: 'Finalize' }));
  }

  /**
   * The socket may already be closed while its close event is still on its way (it is handled
   * in a microtask, after the SDK's error): the SDK then throws "Socket is not open". That is
   * the drop the close event reports, not a second failure: nothing is sent, nothing thrown
   * (from a keepalive timer it would have been an uncaught exception).
   */
  private send(write: () => void): boolean {
    try {
      write();
      return true;
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {
    if (this.state === 'closed') return;
    if (this.state === 'connecting') {
      this.state = 'closing';
      this.socket.close();
      return;
    }
    if (this.state === 'open') {
      this.state = 'closing';
      this.clock.clearInterval(this.keepAlive);
      try {
        // Deepgram flushes its last results and Metadata, then closes with 1000.
        this.socket.sendCloseStream({ type: 'CloseStream' });
      } catch {
        this.socket.close();
      }
    }
    const timer = this.clock.setTimeout(() => this.socket.close(), this.settings.closeTimeoutMs);
    await this.closedPromise;
    this.clock.clearTimeout(timer);
  }

  private onOpen(): void {
    if (this.state !== 'connecting') return;
    this.state = 'open';
    this.lastSentAt = this.clock.now();
    const every = this.settings.keepAliveIntervalMs;
    this.keepAlive = this.clock.setInterval(() => {
      if (this.state !== 'open' || this.clock.now() - this.lastSentAt < every) return;
      if (this.send(() => this.socket.sendKeepAlive({ type: 'KeepAlive' }))) this.lastSentAt = this.clock.now();
    }, every);
    this.settleOpen();
  }

  private onClose(code: number, reason: string): void {
    const was = this.state;
    if (was === 'closed') return;
    this.state = 'closed';
    this.clock.clearInterval(this.keepAlive);
    this.markClosed();
    if (was === 'connecting') {
      const err = this.connectAborted ? abortError('Deepgram connect aborted') : handshakeError(this.lastError ?? `closed with ${code}`);
      this.settleOpen(err);
      this.subject.error(err);
      return;
    }
    if (was === 'closing') {
      this.subject.complete();
      return;
    }
    const detail = [reason, this.lastError].filter(Boolean).join('; ');
    this.subject.error(new DeepgramSTTError('connection_lost', `the Deepgram connection closed unexpectedly (code ${code}${detail ? `: ${detail}` : ''})`, code));
  }
}
