/**
 * `TTSService` over Cartesia's WebSocket TTS (Sonic), through the official `@cartesia/cartesia-js`
 * SDK (connection.ts says what it adds to it). One socket per session, kept open between sentences
 * and closed after `idleCloseMs`; one context per sentence (`continue: false`), with
 * `add_timestamps` (words) and `add_phoneme_timestamps` (phonemes, IPA):
 *
 * - words become `words` events, so the context keeps only the words that were heard ("words as
 *   played", the assistant aggregator);
 * - phonemes become `phonemes` events: the face's mouth follows Cartesia's own timing;
 * - audio is held back until the timings of what it contains have arrived (timestamps.ts), at most
 *   `maxHoldMs`.
 *
 * An interruption cancels the sentence's context (`{context_id, cancel: true}`): the provider is
 * told, and its late messages for that context are dropped. Audio is raw `pcm_s16le` at the
 * pipeline's rate when Cartesia offers it, else 24 kHz resampled here.
 */
import { randomUUID } from 'node:crypto';
import { abortError } from '../../core/clock.ts';
import { resolveOptions, type Resolved } from '../../core/options.ts';
import type { TTSEvent, TTSRequest, TTSService } from '../../processors/services.ts';
import { PcmStream } from '../../processors/tts/pcm-stream.ts';
import { CartesiaConnection } from './connection.ts';
import { CartesiaTTSError } from './errors.ts';
import { TimingGate, phonemeTimings, wordTimings } from './timestamps.ts';

export const CARTESIA_TTS_DEFAULTS = {
  model: 'sonic-3',
  /** A voice id of Cartesia's own API examples; the agent's `voice_id` (a Cartesia voice id) wins. */
  voice: 'a0e99841-438c-4a64-b679-ae501e7d6091',
  /** API root (the SDK's `baseURL`); the socket goes to wss://<host>/tts/websocket. */
  baseUrl: 'https://api.cartesia.ai',
  connectTimeoutMs: 10_000,
  /** The socket is closed after this long without a sentence. */
  idleCloseMs: 10_000,
  /** Ask for phoneme timings (the face's mouth follows them). */
  phonemeTimestamps: true,
  /** Most audio held back waiting for its timings (ms). */
  maxHoldMs: 300,
} as const;

/** `pcm_s16le` rates Cartesia offers. */
export const CARTESIA_RATES = [8000, 16000, 22050, 24000, 44100, 48000] as const;

const VOICE_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface CartesiaTTSOptions {
  /** Defaults to `CARTESIA_API_KEY`. */
  readonly apiKey?: string;
  readonly baseUrl?: string;
  readonly model?: string;
  readonly voice?: string;
  readonly connectTimeoutMs?: number;
  readonly idleCloseMs?: number;
  readonly phonemeTimestamps?: boolean;
  readonly maxHoldMs?: number;
  /** Extra TLS trust for the socket (a local server with its own certificate). */
  readonly tls?: { ca?: string | Buffer };
}

const ABORTED = 'speech synthesis aborted';

export class CartesiaTTSService implements TTSService {
  readonly name = 'cartesia';
  readonly model: string;
  readonly voice: string;
  private readonly settings: Resolved<typeof CARTESIA_TTS_DEFAULTS>;
  private readonly apiKey: string;
  private connection: CartesiaConnection | undefined;
  private opening: Promise<CartesiaConnection> | undefined;
  private idleTimer: NodeJS.Timeout | undefined;
  private active = 0;

  constructor(private readonly options: CartesiaTTSOptions = {}, env: NodeJS.ProcessEnv = process.env) {
    const apiKey = options.apiKey ?? env.CARTESIA_API_KEY;
    if (!apiKey) throw new CartesiaTTSError('key_missing', 'no Cartesia API key: pass the apiKey option or set CARTESIA_API_KEY');
    this.apiKey = apiKey;
    this.settings = resolveOptions(CARTESIA_TTS_DEFAULTS, { ...options, model: options.model ?? env.CARTESIA_TTS_MODEL, voice: options.voice ?? env.CARTESIA_TTS_VOICE });
    this.model = this.settings.model;
    this.voice = this.settings.voice;
  }

  async *synthesize(request: TTSRequest): AsyncIterable<TTSEvent> {
    const { signal } = request;
    if (signal?.aborted) throw abortError(ABORTED);
    if (!request.text.trim()) return;
    const rate = (CARTESIA_RATES as readonly number[]).includes(request.sampleRate) ? request.sampleRate : 24_000;
    const pcm = new PcmStream(rate, request.sampleRate);
    const gate = new TimingGate(request.sampleRate, this.settings.maxHoldMs, this.settings.phonemeTimestamps ? ['words', 'phonemes'] : ['words']);
    const language = request.language ? request.language.split(/[-_]/)[0]!.toLowerCase() : undefined;
    this.active++;
    clearTimeout(this.idleTimer);
    try {
      const connection = await this.connect(signal);
      const events = connection.generate(
        {
          context_id: randomUUID(),
          model_id: this.model,
          transcript: request.text,
          voice: { mode: 'id', id: request.voiceId && VOICE_ID.test(request.voiceId) ? request.voiceId : this.voice },
          output_format: { container: 'raw', encoding: 'pcm_s16le', sample_rate: rate },
          ...(language ? { language } : {}),
          continue: false,
          add_timestamps: true,
          add_phoneme_timestamps: this.settings.phonemeTimestamps,
          use_normalized_timestamps: false,
        },
        signal,
      );
      for await (const event of events) {
        if (event.type === 'audio') gate.add(pcm.push(event.bytes));
        else if (event.type === 'words') {
          const words = wordTimings(event.words as never);
          if (words.length) {
            gate.timedUntil('words', Math.max(...words.map((w) => w.endMs)));
            yield { type: 'words', words };
          }
        } else if (event.type === 'phonemes') {
          const phonemes = phonemeTimings(event.phonemes as never);
          if (phonemes.length) {
            gate.timedUntil('phonemes', Math.max(...phonemes.map((p) => p.endMs)));
            yield { type: 'phonemes', phonemes };
          }
        }
        const ready = gate.release();
        if (ready) yield { type: 'audio', pcm: ready, sampleRate: request.sampleRate };
      }
      if (signal?.aborted) throw abortError(ABORTED);
      gate.add(pcm.flush());
      const rest = gate.release(true);
      if (rest) yield { type: 'audio', pcm: rest, sampleRate: request.sampleRate };
    } catch (err) {
      if (signal?.aborted) throw abortError(ABORTED);
      throw err;
    } finally {
      if (--this.active === 0) {
        this.idleTimer = setTimeout(() => this.close(), this.settings.idleCloseMs);
        this.idleTimer.unref();
      }
    }
  }

  /** Closes the socket now (it reopens on the next sentence). */
  close(): void {
    clearTimeout(this.idleTimer);
    this.connection?.close();
    this.connection = undefined;
  }

  private async connect(signal?: AbortSignal): Promise<CartesiaConnection> {
    if (this.connection?.usable) return this.connection;
    this.connection?.close();
    this.connection = undefined;
    this.opening ??= CartesiaConnection.open({ apiKey: this.apiKey, baseUrl: this.settings.baseUrl, connectTimeoutMs: this.settings.connectTimeoutMs, ...(this.options.tls?.ca ? { ca: this.options.tls.ca } : {}) }, signal).finally(() => (this.opening = undefined));
    this.connection = await this.opening;
    return this.connection;
  }
}
