/**
 * `TTSService` over Deepgram Aura's streaming speak WebSocket, through `@deepgram/sdk` v5
 * (`speak.v1.connect`): one socket per session, kept open between sentences (no handshake per
 * sentence), closed after `idleCloseMs` without speech. Each sentence is `Speak` + `Flush` and
 * ends at `Flushed`; an interruption sends `Clear` (speak-connection.ts). The SDK's reconnecting
 * socket is told not to reconnect: a dropped socket fails the sentence in progress, and the next
 * sentence opens a fresh one.
 *
 * Audio: linear16 at the pipeline's rate when Deepgram offers it (8, 16, 24, 32, 48 kHz), else
 * 24 kHz resampled here. Voice: in Aura the voice is the model (`aura-2-thalia-en`); an agent
 * `voice_id` starting with `aura-` picks it. No word timings come back: the TTS processor
 * estimates them.
 */
import { DeepgramClient } from '@deepgram/sdk';
import { abortError } from '../../core/clock.ts';
import { resolveOptions, type Resolved } from '../../core/options.ts';
import type { TTSEvent, TTSRequest, TTSService } from '../../processors/services.ts';
import { PcmStream } from '../../processors/tts/pcm-stream.ts';
import { DeepgramTTSError } from './errors.ts';
import { SpeakConnection } from './speak-connection.ts';

export const DEEPGRAM_TTS_DEFAULTS = {
  /** The voice (an Aura model) when the agent's `voice_id` is not an `aura-` name. */
  model: 'aura-2-thalia-en',
  /** WebSocket root (the SDK's `baseUrl`). */
  baseUrl: 'wss://api.deepgram.com',
  connectTimeoutMs: 10_000,
  /** After an interruption, how long the next sentence waits for `Cleared` before using a fresh socket. */
  clearTimeoutMs: 2_000,
  /** The socket is closed after this long without a sentence (a session's end leaves nothing open). */
  idleCloseMs: 10_000,
} as const;

/** linear16 rates the speak API offers. */
export const DEEPGRAM_SPEAK_RATES = [8000, 16000, 24000, 32000, 48000] as const;

export interface DeepgramTTSOptions {
  /** Defaults to `DEEPGRAM_API_KEY`. */
  readonly apiKey?: string;
  readonly baseUrl?: string;
  readonly model?: string;
  readonly connectTimeoutMs?: number;
  readonly clearTimeoutMs?: number;
  readonly idleCloseMs?: number;
}

const ABORTED = 'speech synthesis aborted';

export class DeepgramTTSService implements TTSService {
  readonly name = 'deepgram';
  readonly model: string;
  private readonly client: DeepgramClient;
  private readonly settings: Resolved<typeof DEEPGRAM_TTS_DEFAULTS>;
  private connection: SpeakConnection | undefined;
  private idleTimer: NodeJS.Timeout | undefined;
  /** Sentences go one at a time on the shared socket. */
  private turn: Promise<void> = Promise.resolve();

  constructor(options: DeepgramTTSOptions = {}, env: NodeJS.ProcessEnv = process.env) {
    const apiKey = options.apiKey ?? env.DEEPGRAM_API_KEY;
    if (!apiKey) throw new DeepgramTTSError('key_missing', 'no Deepgram API key for text-to-speech: pass the apiKey option or set DEEPGRAM_API_KEY');
    this.settings = resolveOptions(DEEPGRAM_TTS_DEFAULTS, { ...options, model: options.model ?? env.DEEPGRAM_TTS_MODEL });
    this.model = this.settings.model;
    this.client = new DeepgramClient({ apiKey, baseUrl: this.settings.baseUrl });
  }

  async *synthesize(request: TTSRequest): AsyncIterable<TTSEvent> {
    const { signal } = request;
    if (signal?.aborted) throw abortError(ABORTED);
    if (!request.text.trim()) return;
    let release!: () => void;
    const previous = this.turn;
    this.turn = new Promise<void>((resolve) => (release = resolve));
    await previous;
    clearTimeout(this.idleTimer);
    try {
      const model = request.voiceId && /^aura-/.test(request.voiceId) ? request.voiceId : this.model;
      const rate = (DEEPGRAM_SPEAK_RATES as readonly number[]).includes(request.sampleRate) ? request.sampleRate : 24_000;
      let connection = await this.connect(model, rate, signal);
      // After an interruption the socket waits for Deepgram's Cleared; one not confirmed in time is
      // dropped, and this sentence goes on a fresh socket instead of failing with it.
      if (!(await connection.settled(signal))) connection = await this.connect(model, rate, signal);
      if (signal?.aborted) throw abortError(ABORTED);
      const pcm = new PcmStream(rate, request.sampleRate);
      for await (const bytes of connection.speak(request.text, signal)) {
        const samples = pcm.push(bytes);
        if (samples.length) yield { type: 'audio', pcm: samples, sampleRate: request.sampleRate };
      }
      if (signal?.aborted) throw abortError(ABORTED);
      const tail = pcm.flush();
      if (tail.length) yield { type: 'audio', pcm: tail, sampleRate: request.sampleRate };
    } finally {
      this.idleTimer = setTimeout(() => this.closeConnection(), this.settings.idleCloseMs);
      this.idleTimer.unref();
      release();
    }
  }

  /** Closes the socket now (it reopens on the next sentence). */
  close(): void {
    clearTimeout(this.idleTimer);
    this.closeConnection();
  }

  private closeConnection(): void {
    this.connection?.close();
    this.connection = undefined;
  }

  private async connect(model: string, rate: number, signal?: AbortSignal): Promise<SpeakConnection> {
    const current = this.connection;
    if (current?.usable && current.model === model && current.sampleRate === rate) return current;
    current?.close();
    const socket = await this.client.speak.v1.connect({
      model: model as 'aura-2-thalia-en',
      encoding: 'linear16',
      sample_rate: String(rate),
      // Reconnecting mid-sentence would lose the sentence's state: a drop fails the sentence instead.
      reconnectAttempts: 0,
      shouldReconnect: () => false,
      connectionTimeoutInSeconds: this.settings.connectTimeoutMs / 1000,
    } as unknown as Parameters<DeepgramClient['speak']['v1']['connect']>[0]);
    const connection = new SpeakConnection(socket, model, rate, this.settings.clearTimeoutMs);
    this.connection = connection;
    socket.connect();
    try {
      await connection.opened(signal);
    } catch (err) {
      this.connection = undefined;
      throw err;
    }
    return connection;
  }
}
