/**
 * `TTSService` over `POST /v1/audio/speech` through the openai SDK (`audio.speech.create`), with
 * `response_format: "pcm"`: raw 24 kHz little-endian int16, read as the body streams in, so a
 * sentence's first audio leaves before the server has finished it. The TTS processor cuts the
 * answer into sentences (or clauses), so the first audio does not wait for the whole answer either.
 * Works with OpenAI-compatible speech servers (Kokoro-FastAPI, Speaches, ...) given their base URL;
 * `sourceSampleRate` says what rate such a server sends when it is not 24 kHz.
 *
 * No word timings come back: the TTS processor estimates them from the text and the audio length.
 * An abort cancels the HTTP request (the server is told by the closed connection).
 */
import OpenAI from 'openai';
import { abortError } from '../../core/clock.ts';
import { resolveOptions, type Resolved } from '../../core/options.ts';
import type { TTSEvent, TTSRequest, TTSService } from '../../processors/services.ts';
import { PcmStream } from '../../processors/tts/pcm-stream.ts';
import { audioRequestError, OpenAIAudioError } from './errors.ts';

export const OPENAI_TTS_DEFAULTS = {
  model: 'gpt-4o-mini-tts',
  /** Voice when the agent sets none (`voice_id`). */
  voice: 'alloy',
  /** API root; `OPENAI_TTS_BASE_URL`, then `OPENAI_BASE_URL`, then the `baseUrl` option override it. */
  baseUrl: 'https://api.openai.com/v1',
  /** Rate of the `pcm` the server sends (OpenAI: 24 kHz). */
  sourceSampleRate: 24_000,
  /** SDK retries (connection errors, 408/409/429 honouring Retry-After, 5xx) before audio starts. */
  maxRetries: 2,
  timeoutMs: 30_000,
} as const;

/** The voices OpenAI's speech endpoint offers (other servers have their own names). */
export const OPENAI_TTS_VOICES = ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'nova', 'onyx', 'sage', 'shimmer', 'verse', 'marin', 'cedar'] as const;

export interface OpenAITTSOptions {
  /** Defaults to `OPENAI_TTS_API_KEY`, then `OPENAI_API_KEY`. */
  readonly apiKey?: string;
  readonly baseUrl?: string;
  readonly model?: string;
  readonly voice?: string;
  /** Speaking rate (0.25-4), sent only when set. */
  readonly speed?: number;
  /** Voice direction for `gpt-4o-mini-tts` ("Speak calmly."), sent only when set. */
  readonly instructions?: string;
  readonly sourceSampleRate?: number;
  readonly maxRetries?: number;
  readonly timeoutMs?: number;
}

const ABORTED = 'speech synthesis aborted';

export class OpenAITTSService implements TTSService {
  readonly name = 'openai';
  readonly model: string;
  readonly voice: string;
  readonly baseUrl: string;
  private readonly client: OpenAI;
  private readonly settings: Resolved<typeof OPENAI_TTS_DEFAULTS>;

  constructor(private readonly options: OpenAITTSOptions = {}, env: NodeJS.ProcessEnv = process.env) {
    const apiKey = options.apiKey ?? env.OPENAI_TTS_API_KEY ?? env.OPENAI_API_KEY;
    if (!apiKey) {
      throw new OpenAIAudioError('key_missing', 'no OpenAI API key for text-to-speech: pass the apiKey option or set OPENAI_TTS_API_KEY or OPENAI_API_KEY (a self-hosted server accepts any placeholder)');
    }
    this.settings = resolveOptions(OPENAI_TTS_DEFAULTS, {
      ...options,
      baseUrl: options.baseUrl ?? env.OPENAI_TTS_BASE_URL ?? env.OPENAI_BASE_URL,
      model: options.model ?? env.OPENAI_TTS_MODEL,
      voice: options.voice ?? env.OPENAI_TTS_VOICE,
      sourceSampleRate: options.sourceSampleRate ?? (env.OPENAI_TTS_SAMPLE_RATE ? Number(env.OPENAI_TTS_SAMPLE_RATE) : undefined),
    });
    this.model = this.settings.model;
    this.voice = this.settings.voice;
    this.baseUrl = this.settings.baseUrl;
    this.client = new OpenAI({ apiKey, baseURL: this.baseUrl, maxRetries: this.settings.maxRetries, timeout: this.settings.timeoutMs });
  }

  async *synthesize(request: TTSRequest): AsyncIterable<TTSEvent> {
    const { signal } = request;
    if (signal?.aborted) throw abortError(ABORTED);
    if (!request.text.trim()) return;
    const pcm = new PcmStream(this.settings.sourceSampleRate, request.sampleRate);
    try {
      const response = await this.client.audio.speech.create(
        {
          model: this.model,
          voice: (request.voiceId || this.voice) as 'alloy',
          input: request.text,
          response_format: 'pcm',
          ...(this.options.speed !== undefined ? { speed: this.options.speed } : {}),
          ...(this.options.instructions ? { instructions: this.options.instructions } : {}),
        },
        { signal },
      );
      const type = response.headers.get('content-type') ?? '';
      // A server that answers 200 with a JSON or HTML page (an error, a proxy) is not sending PCM.
      if (/json|text|html/i.test(type)) {
        const body = (await response.text()).slice(0, 200);
        throw new OpenAIAudioError('invalid_response', `the speech server sent ${type} instead of raw PCM: ${body}`);
      }
      if (!response.body) throw new OpenAIAudioError('invalid_response', 'the speech server sent no body');
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
        if (signal?.aborted) throw abortError(ABORTED);
        const samples = pcm.push(chunk);
        if (samples.length) yield { type: 'audio', pcm: samples, sampleRate: request.sampleRate };
      }
    } catch (err) {
      throw audioRequestError(err, 'speech request', signal, ABORTED);
    }
    if (signal?.aborted) throw abortError(ABORTED);
    const tail = pcm.flush();
    if (tail.length) yield { type: 'audio', pcm: tail, sampleRate: request.sampleRate };
  }
}
