/**
 * `STTService` over OpenAI speech-to-text, or any OpenAI-compatible server, in one of two modes:
 *
 * - `realtime` (default): a Realtime transcription session (`/v1/realtime?intent=transcription`,
 *   stt-realtime.ts). Audio streams in as it is heard; the utterance is committed when the VAD
 *   says the user stopped (`finalize()`), and the text comes back as deltas (interim) then the
 *   completed transcript (final).
 * - `batch`: for servers that only offer `POST /v1/audio/transcriptions` (most self-hosted
 *   Whisper servers). Audio is kept until the VAD's stop, then that utterance is sent as a WAV file
 *   through the openai SDK and transcribed: final text only, no interim.
 *
 * Either way a dropped connection or a failed request errors `transcripts`, and the STT processor
 * (shared by every vendor) reconnects with backoff, replays the audio no final covered and asks
 * for the final again: the user's words are not lost.
 */
import OpenAI from 'openai';
import { abortError } from '../../core/clock.ts';
import { resolveOptions, type Resolved } from '../../core/options.ts';
import type { STTService, STTStream, STTStreamOptions } from '../../processors/services.ts';
import { OpenAIAudioError } from './errors.ts';
import { BatchTranscriptionStream } from './stt-batch.ts';
import { RealtimeTranscriptionStream } from './stt-realtime.ts';

export const OPENAI_STT_DEFAULTS = {
  /** `realtime` (streaming, interim text) or `batch` (`/v1/audio/transcriptions` at each VAD stop). */
  mode: 'realtime' as 'realtime' | 'batch',
  /** Transcription model (realtime session's `transcription.model`, or the batch request's `model`). */
  model: 'gpt-4o-mini-transcribe',
  /** API root; `OPENAI_STT_BASE_URL`, then `OPENAI_BASE_URL`, then the `baseUrl` option override it. */
  baseUrl: 'https://api.openai.com/v1',
  /** Realtime: `session.updated` must arrive within this (ms). */
  connectTimeoutMs: 10_000,
  /** `close()` waits this long for transcripts of utterances already committed or sent. */
  closeTimeoutMs: 5_000,
  /** Batch: utterances shorter than this (ms) are not sent (the API refuses under 100 ms). */
  minUtteranceMs: 100,
  /** Batch: SDK retries (connection errors, 408/409/429 honouring Retry-After, 5xx) per utterance. */
  maxRetries: 2,
  /** Batch: per-request timeout (ms). */
  timeoutMs: 30_000,
  /**
   * Batch: check the key when connecting (`GET /models`; a 401/403 fails `connect()` with
   * `auth_failed`, a server without that endpoint is accepted). Without it a refused key shows
   * only at the first utterance.
   */
  verifyKey: true,
} as const;

export interface OpenAISTTOptions {
  /** Defaults to `OPENAI_STT_API_KEY`, then `OPENAI_API_KEY`. Self-hosted servers often accept any placeholder. */
  readonly apiKey?: string;
  readonly baseUrl?: string;
  readonly mode?: 'realtime' | 'batch';
  readonly model?: string;
  readonly connectTimeoutMs?: number;
  readonly closeTimeoutMs?: number;
  readonly minUtteranceMs?: number;
  readonly maxRetries?: number;
  readonly timeoutMs?: number;
  readonly verifyKey?: boolean;
  /** Realtime over TLS: extra trust (a local server with its own certificate). */
  readonly tls?: { ca?: string | Buffer };
}

export type OpenAISTTSettings = Resolved<typeof OPENAI_STT_DEFAULTS> & { readonly apiKey: string; readonly tls?: { ca?: string | Buffer } };

export class OpenAISTTService implements STTService {
  readonly name = 'openai';
  readonly model: string;
  readonly mode: 'realtime' | 'batch';
  readonly baseUrl: string;
  private readonly settings: OpenAISTTSettings;
  private readonly client: OpenAI;

  constructor(options: OpenAISTTOptions = {}, env: NodeJS.ProcessEnv = process.env) {
    const apiKey = options.apiKey ?? env.OPENAI_STT_API_KEY ?? env.OPENAI_API_KEY;
    if (!apiKey) {
      throw new OpenAIAudioError('key_missing', 'no OpenAI API key for speech-to-text: pass the apiKey option or set OPENAI_STT_API_KEY or OPENAI_API_KEY (a self-hosted server accepts any placeholder)');
    }
    const fromEnv = {
      baseUrl: options.baseUrl ?? env.OPENAI_STT_BASE_URL ?? env.OPENAI_BASE_URL,
      mode: options.mode ?? (env.OPENAI_STT_MODE as 'realtime' | 'batch' | undefined),
      model: options.model ?? env.OPENAI_STT_MODEL,
    };
    const resolved = resolveOptions(OPENAI_STT_DEFAULTS, { ...options, ...fromEnv });
    if (resolved.mode !== 'realtime' && resolved.mode !== 'batch') {
      throw new OpenAIAudioError('bad_request', `the OpenAI speech-to-text mode must be realtime or batch, got ${JSON.stringify(resolved.mode)} (OPENAI_STT_MODE)`);
    }
    this.settings = { ...resolved, apiKey, ...(options.tls ? { tls: options.tls } : {}) };
    this.model = resolved.model;
    this.mode = resolved.mode;
    this.baseUrl = resolved.baseUrl;
    this.client = new OpenAI({ apiKey, baseURL: resolved.baseUrl, maxRetries: resolved.maxRetries, timeout: resolved.timeoutMs });
  }

  async connect(options: STTStreamOptions, signal?: AbortSignal): Promise<STTStream> {
    if (signal?.aborted) throw abortError('OpenAI transcription connect aborted');
    if (options.channels !== 1) throw new OpenAIAudioError('bad_request', `OpenAI transcription takes mono audio, got ${options.channels} channels`);
    const model = options.model ?? this.model;
    if (this.mode === 'batch') return BatchTranscriptionStream.open(this.client, { ...this.settings, model }, options, signal);
    return RealtimeTranscriptionStream.open({ ...this.settings, model }, options, signal);
  }
}
