/**
 * Batch transcription as an `STTStream`, for OpenAI-compatible servers that only offer
 * `POST /v1/audio/transcriptions` (multipart: `file`, `model`, `language`, `response_format`).
 *
 * Audio is kept until `finalize()` (the VAD's stop): that utterance is sent as a 16-bit WAV file
 * through the openai SDK (`audio.transcriptions.create`, which retries 429 and 5xx with backoff
 * honouring Retry-After) and its text comes back as one final, `endMs` = where the utterance was
 * cut (ms of audio sent on this stream). Utterances go one at a time, in order. A request that
 * still fails errors `transcripts`; the STT processor reconnects (a fresh stream), replays the
 * audio no final covered and asks for the final again.
 */
import type OpenAI from 'openai';
import { toFile } from 'openai';
import { Subject } from 'rxjs';
import { concat, encodeWav } from '../../core/audio.ts';
import { abortError, linkedSignal } from '../../core/clock.ts';
import type { STTStream, STTStreamOptions, TranscriptEvent } from '../../processors/services.ts';
import { audioRequestError, OpenAIAudioError } from './errors.ts';
import type { OpenAISTTSettings } from './stt.ts';

export class BatchTranscriptionStream implements STTStream {
  readonly transcripts;
  private readonly subject = new Subject<TranscriptEvent>();
  private utterance: Int16Array[] = [];
  private utteranceSamples = 0;
  private sentSamples = 0;
  private queue: Promise<void> = Promise.resolve();
  private inFlight = 0;
  private state: 'open' | 'closing' | 'closed' = 'open';
  private readonly abort = new AbortController();

  static async open(client: OpenAI, settings: OpenAISTTSettings, options: STTStreamOptions, signal?: AbortSignal): Promise<BatchTranscriptionStream> {
    if (settings.verifyKey) await verifyKey(client, signal);
    return new BatchTranscriptionStream(client, settings, options);
  }

  private constructor(
    private readonly client: OpenAI,
    private readonly settings: OpenAISTTSettings,
    private readonly options: STTStreamOptions,
  ) {
    this.transcripts = this.subject.asObservable();
  }

  sendAudio(pcm: Int16Array): void {
    if (this.state !== 'open' || pcm.length === 0) return;
    this.utterance.push(pcm);
    this.utteranceSamples += pcm.length;
    this.sentSamples += pcm.length;
  }

  finalize(): void {
    if (this.state !== 'open') return;
    const rate = this.options.sampleRate;
    if ((this.utteranceSamples / rate) * 1000 < this.settings.minUtteranceMs) return;
    const audio = concat(this.utterance);
    const endMs = Math.round((this.sentSamples / rate) * 1000);
    this.utterance = [];
    this.utteranceSamples = 0;
    this.inFlight++;
    this.queue = this.queue.then(() => this.transcribe(audio, endMs)).finally(() => this.inFlight--);
  }

  private async transcribe(audio: Int16Array, endMs: number): Promise<void> {
    if (this.state === 'closed') return;
    const language = this.options.language ? this.options.language.split(/[-_]/)[0]!.toLowerCase() : undefined;
    let text: string;
    // A signal per request: the SDK leaves its listener on the signal it is given.
    const link = linkedSignal(this.abort.signal);
    try {
      const file = await toFile(encodeWav(audio, this.options.sampleRate), 'utterance.wav', { type: 'audio/wav' });
      const result = await this.client.audio.transcriptions.create(
        { file, model: this.settings.model, response_format: 'json', ...(language ? { language } : {}) },
        { signal: link.signal },
      );
      if (typeof (result as { text?: unknown })?.text !== 'string') {
        throw new OpenAIAudioError('invalid_response', `the transcription server answered without a text field: ${JSON.stringify(result).slice(0, 120)}`);
      }
      text = (result as { text: string }).text.trim();
    } catch (err) {
      if ((this.state as string) === 'closed') return;
      const failure = err instanceof SyntaxError ? new OpenAIAudioError('invalid_response', `the transcription server answered with something that is not JSON: ${err.message}`) : audioRequestError(err, 'transcription request', undefined, 'transcription aborted');
      this.state = 'closed';
      this.subject.error(failure);
      return;
    } finally {
      link.release();
    }
    if ((this.state as string) === 'closed') return;
    this.subject.next({ text, final: true, endOfUtterance: true, endMs, language: this.options.language });
  }

  async close(): Promise<void> {
    if (this.state !== 'open') return;
    this.state = 'closing';
    // Utterances already cut are still transcribed, within bounds.
    let timer: NodeJS.Timeout | undefined;
    const finished = await Promise.race([this.queue.then(() => true), new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), this.settings.closeTimeoutMs)))]);
    clearTimeout(timer);
    if (!finished) this.abort.abort();
    if ((this.state as string) === 'closed') return;
    this.state = 'closed';
    this.subject.complete();
  }
}

/** A refused key fails here; a server without `/models` (404/405) is not a failure. */
async function verifyKey(client: OpenAI, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) throw abortError('OpenAI transcription connect aborted');
  try {
    await client.models.list({ signal, maxRetries: 0 });
  } catch (err) {
    const failure = audioRequestError(err, 'key check (GET /models)', signal, 'OpenAI transcription connect aborted');
    if (failure instanceof OpenAIAudioError && (failure.status === 404 || failure.status === 405)) return;
    if (failure instanceof OpenAIAudioError && failure.code === 'connection_lost') {
      throw new OpenAIAudioError('connect_failed', failure.message, undefined, { cause: err });
    }
    throw failure;
  }
}
