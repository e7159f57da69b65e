/**
 * One OpenAI Realtime transcription session (`wss://<base>/realtime?intent=transcription`, GA
 * events) as an `STTStream`.
 *
 * Why a plain `ws` socket and not the SDK's `OpenAIRealtimeWS`: the openai SDK this project uses
 * (6.x) builds the Realtime URL with `model=` always, and OpenAI documents that a model URL opens a
 * conversation session, which refuses `session.type: "transcription"`; a transcription session
 * needs `intent=transcription` without a model (openai 7 adds that option). The events are the
 * SDK's types; the REST parts of the plugin use the SDK. A `http://` base URL (a self-hosted
 * server) gives `ws://`, `https://` gives `wss://`.
 *
 * Protocol: `session.update` with `{type: "transcription", audio.input: {format: audio/pcm 24 kHz,
 * transcription: {model, language}, turn_detection: null}}` (our VAD decides when an utterance
 * ends), answered by `session.updated`; audio as `input_audio_buffer.append` (base64 PCM16 at
 * 24 kHz, resampled here); `finalize()` sends `input_audio_buffer.commit`, answered by
 * `input_audio_buffer.committed {item_id}`; the text arrives as
 * `conversation.item.input_audio_transcription.delta` (interim) and `.completed` (final).
 */
import WebSocket from 'ws';
import { Subject } from 'rxjs';
import { Resampler, int16ToBytes } from '../../core/audio.ts';
import { abortError } from '../../core/clock.ts';
import { codeForHttpStatus } from '../../core/provider-error.ts';
import type { STTStream, STTStreamOptions, TranscriptEvent } from '../../processors/services.ts';
import { OpenAIAudioError } from './errors.ts';
import type { OpenAISTTSettings } from './stt.ts';

/** The only PCM rate a GA Realtime session takes. */
export const REALTIME_AUDIO_RATE = 24_000;

/** Error codes OpenAI sends that mean the key is not usable. */
const AUTH_CODES = new Set(['invalid_api_key', 'insufficient_quota', 'unauthorized', 'account_deactivated']);

type State = 'connecting' | 'open' | 'closing' | 'closed';

interface Utterance {
  /** ms of audio sent on this connection when it was committed (the final's `endMs`). */
  readonly endMs: number;
  itemId?: string;
  text: string;
}

export function realtimeUrl(baseUrl: string): string {
  const url = new URL(baseUrl.replace(/\/+$/, '') + '/realtime');
  url.protocol = url.protocol === 'http:' || url.protocol === 'ws:' ? 'ws:' : 'wss:';
  url.searchParams.set('intent', 'transcription');
  return url.toString();
}

export class RealtimeTranscriptionStream implements STTStream {
  readonly transcripts;
  private readonly subject = new Subject<TranscriptEvent>();
  private state: State = 'connecting';
  private readonly resampler: Resampler | undefined;
  private sentSamples = 0;
  private committedSamples = 0;
  /** Committed utterances whose transcript has not completed, in commit order. */
  private readonly pending: Utterance[] = [];
  private readonly byItem = new Map<string, Utterance>();
  private settleOpen!: (err?: Error) => void;
  private readonly opened: Promise<void>;
  private drained: (() => void) | undefined;

  static async open(settings: OpenAISTTSettings, options: STTStreamOptions, signal?: AbortSignal): Promise<RealtimeTranscriptionStream> {
    const socket = new WebSocket(realtimeUrl(settings.baseUrl), {
      headers: { Authorization: `Bearer ${settings.apiKey}` },
      handshakeTimeout: settings.connectTimeoutMs,
      ...(settings.tls?.ca ? { ca: settings.tls.ca } : {}),
    });
    const stream = new RealtimeTranscriptionStream(socket, settings, options);
    const onAbort = () => socket.terminate();
    signal?.addEventListener('abort', onAbort, { once: true });
    const timer = setTimeout(() => stream.fail(new OpenAIAudioError('timeout', `no session.updated from the transcription server within ${settings.connectTimeoutMs} ms`)), settings.connectTimeoutMs);
    try {
      await stream.opened;
    } catch (err) {
      socket.terminate();
      throw signal?.aborted ? abortError('OpenAI transcription connect aborted') : err;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
    }
    return stream;
  }

  private constructor(
    private readonly socket: WebSocket,
    private readonly settings: OpenAISTTSettings,
    private readonly options: STTStreamOptions,
  ) {
    this.transcripts = this.subject.asObservable();
    this.resampler = options.sampleRate === REALTIME_AUDIO_RATE ? undefined : new Resampler(options.sampleRate, REALTIME_AUDIO_RATE);
    this.opened = new Promise<void>((resolve, reject) => (this.settleOpen = (err) => (err ? reject(err) : resolve())));
    this.opened.catch(() => undefined);
    socket.on('open', () => this.send(this.sessionUpdate()));
    socket.on('unexpected-response', (_req, res) => {
      const status = res.statusCode ?? 0;
      const code = codeForHttpStatus(status);
      const hint = code === 'auth_failed' ? '; check the API key' : code === 'rate_limited' ? '; the key is rate limited' : '';
      this.fail(new OpenAIAudioError(code === 'provider_error' ? 'connect_failed' : code, `the transcription server refused the connection (HTTP ${status})${hint}`, status));
      res.resume();
    });
    socket.on('message', (data, binary) => this.onMessage(binary ? null : data.toString()));
    socket.on('error', (err) => this.fail(new OpenAIAudioError(this.state === 'connecting' ? 'connect_failed' : 'connection_lost', `transcription socket error: ${err.message}`, undefined, { cause: err })));
    socket.on('close', (code, reason) => this.onClose(code, reason.toString()));
  }

  private sessionUpdate(): Record<string, unknown> {
    const language = this.options.language ? this.options.language.split(/[-_]/)[0]!.toLowerCase() : undefined;
    return {
      type: 'session.update',
      session: {
        type: 'transcription',
        audio: {
          input: {
            format: { type: 'audio/pcm', rate: REALTIME_AUDIO_RATE },
            transcription: { model: this.settings.model, ...(language ? { language } : {}) },
            // Our VAD ends utterances (finalize() commits); the server's own would cut differently.
            turn_detection: null,
          },
        },
      },
    };
  }

  sendAudio(pcm: Int16Array): void {
    if (this.state !== 'open' || pcm.length === 0) return;
    this.sentSamples += pcm.length;
    const audio = this.resampler ? this.resampler.process(pcm) : pcm;
    if (audio.length) this.send({ type: 'input_audio_buffer.append', audio: Buffer.from(int16ToBytes(audio)).toString('base64') });
  }

  finalize(): void {
    if (this.state !== 'open') return;
    const uncommittedMs = ((this.sentSamples - this.committedSamples) / this.options.sampleRate) * 1000;
    // OpenAI refuses a commit of less than 100 ms (input_audio_buffer_commit_empty).
    if (uncommittedMs < 100) return;
    this.committedSamples = this.sentSamples;
    this.pending.push({ endMs: Math.round((this.sentSamples / this.options.sampleRate) * 1000), text: '' });
    this.send({ type: 'input_audio_buffer.commit' });
  }

  async close(): Promise<void> {
    if (this.state === 'closed') return;
    if (this.state === 'open' && this.pending.length) {
      // Utterances already committed are still transcribed: wait for them, within bounds.
      this.state = 'closing';
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, this.settings.closeTimeoutMs);
        this.drained = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    if ((this.state as State) === 'closed') return;
    this.state = 'closing';
    const closed = new Promise<void>((resolve) => this.socket.once('close', () => resolve()));
    if (this.socket.readyState === WebSocket.CONNECTING) this.socket.terminate();
    else this.socket.close(1000);
    const timer = setTimeout(() => this.socket.terminate(), this.settings.closeTimeoutMs);
    await closed;
    clearTimeout(timer);
  }

  private send(event: Record<string, unknown>): void {
    if (this.socket.readyState !== WebSocket.OPEN) return;
    this.socket.send(JSON.stringify(event));
  }

  private onMessage(text: string | null): void {
    let event: any;
    try {
      event = text === null ? undefined : JSON.parse(text);
    } catch {
      event = undefined;
    }
    if (!event || typeof event !== 'object' || typeof event.type !== 'string') {
      const shown = text === null ? 'a binary frame' : JSON.stringify(text.slice(0, 80));
      return this.fail(new OpenAIAudioError('invalid_response', `the transcription server sent a message that is not a Realtime event: ${shown}`));
    }
    switch (event.type) {
      case 'session.updated':
        if (this.state === 'connecting') {
          this.state = 'open';
          this.settleOpen();
        }
        return;
      case 'input_audio_buffer.committed': {
        const next = this.pending.find((u) => u.itemId === undefined);
        if (next && typeof event.item_id === 'string') {
          next.itemId = event.item_id;
          this.byItem.set(event.item_id, next);
        }
        return;
      }
      case 'conversation.item.input_audio_transcription.delta': {
        const u = this.byItem.get(event.item_id);
        if (!u || typeof event.delta !== 'string') return;
        u.text += event.delta;
        if (u.text.trim()) this.subject.next({ text: u.text.trim(), final: false, language: this.options.language });
        return;
      }
      case 'conversation.item.input_audio_transcription.completed': {
        const u = this.byItem.get(event.item_id);
        if (!u) return;
        this.forget(u);
        const text = String(event.transcript ?? u.text).trim();
        this.subject.next({ text, final: true, endOfUtterance: true, endMs: u.endMs, language: this.options.language });
        return;
      }
      case 'conversation.item.input_audio_transcription.failed': {
        // The audio is not acknowledged: the STT processor reconnects and replays it.
        const detail = event.error?.message ?? 'no reason given';
        return this.fail(new OpenAIAudioError('provider_error', `the transcription of an utterance failed: ${detail}`));
      }
      case 'error':
        return this.onError(event.error ?? {});
      default:
        return; // session.created, speech events, conversation.item.added/done ...
    }
  }

  private onError(error: { code?: string | null; type?: string; message?: string }): void {
    const code = error.code ?? '';
    const message = error.message ?? 'no message';
    if (AUTH_CODES.has(code)) return this.fail(new OpenAIAudioError('auth_failed', `OpenAI refused the key: ${message}`));
    if (code === 'rate_limit_exceeded') return this.fail(new OpenAIAudioError('rate_limited', `OpenAI is rate limiting this key: ${message}`));
    // A commit the server found empty loses nothing (there was no speech to transcribe).
    if (code === 'input_audio_buffer_commit_empty') {
      const u = this.pending.find((p) => p.itemId === undefined);
      if (u) this.forget(u);
      return;
    }
    if (this.state === 'connecting') return this.fail(new OpenAIAudioError('bad_request', `the transcription server refused the session settings (${code || error.type}): ${message}`));
    this.fail(new OpenAIAudioError('provider_error', `the transcription server reported an error (${code || error.type}): ${message}`));
  }

  private forget(u: Utterance): void {
    this.pending.splice(this.pending.indexOf(u), 1);
    if (u.itemId) this.byItem.delete(u.itemId);
    if (!this.pending.length) this.drained?.();
  }

  /** Ends the stream with `err` (once): rejects the opening, or errors `transcripts`. */
  private fail(err: OpenAIAudioError): void {
    if (this.state === 'closed') return;
    const was = this.state;
    this.state = 'closed';
    this.socket.terminate();
    if (was === 'connecting') this.settleOpen(err);
    this.drained?.();
    this.subject.error(err);
  }

  private onClose(code: number, reason: string): void {
    const was = this.state;
    if (was === 'closed') return;
    this.state = 'closed';
    this.drained?.();
    if (was === 'closing') return this.subject.complete();
    const err = new OpenAIAudioError(was === 'connecting' ? 'connect_failed' : 'connection_lost', `the transcription connection closed unexpectedly (code ${code}${reason ? `: ${reason}` : ''})`, code);
    if (was === 'connecting') this.settleOpen(err);
    this.subject.error(err);
  }
}
