/**
 * `TTSService` over ElevenLabs, through the official `elevenlabs` SDK (v1.x).
 *
 * Transport: the HTTP `stream/with-timestamps` endpoint (`textToSpeech.streamWithTimestamps`).
 * ElevenLabs' WebSocket stream-input API would let text flow in as the LLM writes it, but the
 * v1 SDK ships only that API's message types, no client for it; the brief is to use the SDK,
 * so each sentence or clause from the TTS processor's aggregator is one HTTP request.
 *
 * Audio is requested as raw little-endian int16 PCM (`pcm_<rate>`) at the pipeline's rate when
 * ElevenLabs offers it; otherwise at the nearest offered rate above (events carry the actual
 * rate, and the TTS processor resamples).
 */
import { ElevenLabsClient, ElevenLabsError, ElevenLabsTimeoutError } from 'elevenlabs';
import { concat } from '../../core/audio.ts';
import { abortError } from '../../core/clock.ts';
import type { TTSEvent, TTSRequest, TTSService } from '../../processors/services.ts';
import { WordAligner, timedCharacters, type CharacterAlignment } from './alignment.ts';
import { LetterSounds } from '../../processors/tts/letter-sounds.ts';
import { resolveOptions, type Resolved } from '../../core/options.ts';
import { codeForHttpStatus } from '../../core/provider-error.ts';
import { ElevenLabsTTSError } from './errors.ts';
import { errorMessage } from '../../core/error-message.ts';

export const ELEVENLABS_TTS_DEFAULTS = {
  /** Low-latency multilingual model that accepts `language_code`. */
  model: 'eleven_flash_v2_5',
  /** A premade voice ("Rachel") every account has. */
  voiceId: '21m00Tcm4TlvDq8ikWAM',
  /** API root; the `baseUrl` option overrides it (e.g. a local fake or a residency endpoint). */
  baseUrl: 'https://api.elevenlabs.io',
  /** SDK retries on 408/429/5xx before the stream starts. */
  maxRetries: 1,
  /** Time allowed for the response headers. */
  timeoutMs: 30_000,
  /**
   * Give the face sounds from the character alignment (processors/tts/letter-sounds.ts: English
   * letter-to-sound rules) so its lips close, round and tuck on time; off: the face estimates
   * mouth shapes from the audio alone.
   */
  soundsFromCharacters: true,
} as const;

/** `pcm_<rate>` formats the API offers (44.1 kHz needs a Pro plan on the real service). */
export const ELEVENLABS_PCM_RATES = [8000, 16000, 22050, 24000, 44100, 48000] as const;

/** Models that take `language_code`; others infer the language from the text. */
const LANGUAGE_CODE_MODELS = new Set(['eleven_flash_v2_5', 'eleven_turbo_v2_5', 'eleven_v3']);

export interface ElevenLabsTTSOptions {
  /** Defaults to `ELEVENLABS_API_KEY`. */
  readonly apiKey?: string;
  readonly baseUrl?: string;
  readonly model?: string;
  /** Default voice; a request's `voiceId` (the agent's `voice_id`) wins. */
  readonly voiceId?: string;
  readonly voiceSettings?: { stability?: number; similarity_boost?: number; style?: number; use_speaker_boost?: boolean; speed?: number };
  /** 0-4, ElevenLabs' latency/quality trade-off; unset = service default. */
  readonly optimizeStreamingLatency?: number;
  readonly maxRetries?: number;
  readonly timeoutMs?: number;
  readonly soundsFromCharacters?: boolean;
}

const ABORTED = 'speech synthesis aborted';

/** The offered PCM rate to request for a pipeline rate. */
export function outputRateFor(sampleRate: number): number {
  return ELEVENLABS_PCM_RATES.find((r) => r >= sampleRate) ?? ELEVENLABS_PCM_RATES[ELEVENLABS_PCM_RATES.length - 1];
}

export class ElevenLabsTTSService implements TTSService {
  readonly name = 'elevenlabs';
  readonly model: string;
  readonly voiceId: string;
  private readonly client: ElevenLabsClient;
  private readonly settings: Resolved<typeof ELEVENLABS_TTS_DEFAULTS>;

  constructor(private readonly options: ElevenLabsTTSOptions = {}, env: NodeJS.ProcessEnv = process.env) {
    const apiKey = options.apiKey ?? env.ELEVENLABS_API_KEY;
    if (!apiKey) throw new ElevenLabsTTSError('key_missing', 'no ElevenLabs API key: pass the apiKey option or set ELEVENLABS_API_KEY');
    this.settings = resolveOptions(ELEVENLABS_TTS_DEFAULTS, options);
    this.model = this.settings.model;
    this.voiceId = this.settings.voiceId;
    this.client = new ElevenLabsClient({ apiKey, baseUrl: this.settings.baseUrl });
  }

  async *synthesize(request: TTSRequest): AsyncIterable<TTSEvent> {
    const { signal } = request;
    if (signal?.aborted) throw abortError(ABORTED);
    if (!request.text.trim()) return;
    const sampleRate = outputRateFor(request.sampleRate);
    const language = request.language && LANGUAGE_CODE_MODELS.has(this.model) ? request.language.split(/[-_]/)[0]!.toLowerCase() : undefined;

    const aligner = new WordAligner();
    const sounds = this.settings.soundsFromCharacters ? new LetterSounds() : undefined;
    const pcm = new PcmAssembler();
    const gate = new WordGate(sampleRate);
    try {
      const chunks = await this.client.textToSpeech.streamWithTimestamps(
        request.voiceId || this.voiceId,
        {
          text: request.text,
          model_id: this.model,
          output_format: `pcm_${sampleRate}` as 'pcm_16000',
          ...(language ? { language_code: language } : {}),
          ...(this.options.voiceSettings ? { voice_settings: this.options.voiceSettings } : {}),
          ...(this.options.optimizeStreamingLatency !== undefined ? { optimize_streaming_latency: this.options.optimizeStreamingLatency } : {}),
        },
        {
          ...(signal ? { abortSignal: signal } : {}),
          maxRetries: this.settings.maxRetries,
          timeoutInSeconds: this.settings.timeoutMs / 1000,
        },
      );
      for await (const chunk of chunks) {
        // Original-text alignment, so words match what the LLM wrote (normalised text may not).
        const alignment = (chunk.alignment ?? chunk.normalized_alignment) as CharacterAlignment | null | undefined;
        if (alignment) {
          const words = aligner.push(alignment);
          if (words.length) yield { type: 'words', words };
        }
        // Sounds from the spoken (normalised) text: "42" is said "forty-two".
        const spoken = (chunk.normalized_alignment ?? chunk.alignment) as CharacterAlignment | null | undefined;
        if (sounds && spoken) {
          const phonemes = sounds.push(timedCharacters(spoken));
          if (phonemes.length) yield { type: 'phonemes', phonemes };
        }
        if (chunk.audio_base64) gate.add(pcm.push(Buffer.from(chunk.audio_base64, 'base64')));
        const ready = gate.releaseBefore(earliest(aligner.pendingStartMs, sounds?.pendingStartMs));
        if (ready) yield { type: 'audio', pcm: ready, sampleRate };
      }
    } catch (err) {
      throw await translateError(err, signal);
    }
    if (signal?.aborted) throw abortError(ABORTED);
    const rest = aligner.flush();
    if (rest.length) yield { type: 'words', words: rest };
    const lastSounds = sounds?.flush() ?? [];
    if (lastSounds.length) yield { type: 'phonemes', phonemes: lastSounds };
    const tail = gate.releaseBefore(undefined);
    if (tail) yield { type: 'audio', pcm: tail, sampleRate };
  }
}

const earliest = (a: number | undefined, b: number | undefined) => (a === undefined ? b : b === undefined ? a : Math.min(a, b));

/**
 * Holds back the audio from where the still-unfinished word starts. A word's timing is known
 * only once the character after it arrives, possibly in the next chunk; holding its audio
 * keeps the promise consumers rely on: every word is yielded before the audio it starts in.
 */
class WordGate {
  private held: Int16Array[] = [];
  private heldSamples = 0;
  private releasedSamples = 0;

  constructor(private readonly sampleRate: number) {}

  add(pcm: Int16Array): void {
    if (!pcm.length) return;
    this.held.push(pcm);
    this.heldSamples += pcm.length;
  }

  /** Audio up to 1 ms before `pendingStartMs` (all of it when undefined), or undefined. */
  releaseBefore(pendingStartMs: number | undefined): Int16Array | undefined {
    const limit = pendingStartMs === undefined ? Infinity : Math.floor(((pendingStartMs - 1) * this.sampleRate) / 1000);
    const n = Math.min(this.heldSamples, limit - this.releasedSamples);
    if (n <= 0) return undefined;
    const all = this.held.length === 1 ? this.held[0]! : concat(this.held);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.held = rest.length ? [rest] : [];
    this.heldSamples = rest.length;
    this.releasedSamples += n;
    return out;
  }
}

/** Turns byte chunks into int16 samples, carrying an odd trailing byte to the next chunk. */
class PcmAssembler {
  private carry: Buffer | undefined;

  push(bytes: Buffer): Int16Array {
    const all = this.carry ? Buffer.concat([this.carry, bytes]) : bytes;
    const even = all.length & ~1;
    this.carry = even < all.length ? all.subarray(even) : undefined;
    const out = new Int16Array(even / 2);
    // Copy into a fresh, aligned buffer; PCM is little-endian, as is every host Node runs on.
    new Uint8Array(out.buffer).set(all.subarray(0, even));
    return out;
  }
}

async function translateError(err: unknown, signal: AbortSignal | undefined): Promise<Error> {
  if (signal?.aborted) return abortError(ABORTED);
  if (err instanceof ElevenLabsTTSError) return err;
  if (err instanceof ElevenLabsTimeoutError) return new ElevenLabsTTSError('timeout', err.message, undefined, { cause: err });
  if (err instanceof ElevenLabsError) {
    if (err.statusCode === undefined) {
      return new ElevenLabsTTSError('connection_lost', `could not reach ElevenLabs: ${err.message}`, undefined, { cause: err });
    }
    const detail = await describeBody(err.body);
    // ElevenLabs answers an account out of credits (or held for unusual activity) with 401 too:
    // not a key to fix, so not `auth_failed`.
    if (err.statusCode === 401 && /\((quota_exceeded|detected_unusual_activity)\)$/.test(detail)) {
      return new ElevenLabsTTSError('quota_exceeded', `ElevenLabs refused to synthesise for this account (${err.statusCode}): ${detail}`, err.statusCode, { cause: err });
    }
    return new ElevenLabsTTSError(codeForHttpStatus(err.statusCode), `ElevenLabs request failed (${err.statusCode}): ${detail}`, err.statusCode, { cause: err });
  }
  const message = errorMessage(err);
  if (err instanceof SyntaxError) {
    return new ElevenLabsTTSError('invalid_response', `ElevenLabs sent a stream line that is not JSON: ${message}`, undefined, { cause: err });
  }
  return new ElevenLabsTTSError('connection_lost', `the ElevenLabs audio stream broke: ${message}`, undefined, { cause: err });
}

/** Error bodies of streaming endpoints reach us unread (the SDK hands over the raw stream). */
async function describeBody(body: unknown): Promise<string> {
  let text: string;
  try {
    text = body instanceof ReadableStream ? await new Response(body).text() : typeof body === 'string' ? body : JSON.stringify(body);
  } catch {
    return 'no readable error body';
  }
  try {
    const parsed = JSON.parse(text);
    const d = parsed?.detail;
    if (d && typeof d === 'object' && !Array.isArray(d)) return `${d.message ?? ''}${d.status ? ` (${d.status})` : ''}`.trim();
    if (Array.isArray(d)) return d.map((e: any) => `${(e.loc ?? []).join('.')}: ${e.msg}`).join('; ');
  } catch {
    // not JSON: use the text as is
  }
  return text.slice(0, 300);
}
