/**
 * OpenAI Realtime as an `S2SService`, through the openai SDK's WebSocket client
 * (`openai/realtime/ws`, `OpenAIRealtimeWS`). GA event names; the beta spellings
 * (`response.audio.delta`, `response.audio_transcript.delta`, `conversation.item.created`) are
 * accepted too, so a beta-era compatible server works. PCM16 mono 24 kHz both ways.
 *
 * Agent fields: `sts_config_id` = model (default `gpt-realtime`); `system_prompt` + `language`
 * -> `instructions` (the same language pin as svc mode) and the input transcription language;
 * `voice_id` -> `audio.output.voice` when it is an OpenAI voice name (lowercase word), a
 * `provider_config.voice` wins; `provider_config.turn_detection` (`server_vad` | `semantic_vad`
 * or the object) -> `audio.input.turn_detection`, with `interrupt_response` =
 * `behaviour.allow_interruption`; `starts_conversation` -> a first `response.create`.
 */
import OpenAI from 'openai';
import { OpenAIRealtimeWS } from 'openai/realtime/ws';
import { Subject } from 'rxjs';
import { bytesToInt16, int16ToBytes } from '../../core/audio.ts';
import { languagePin } from '../../processors/llm/context.ts';
import { S2SError, type S2SConnectOptions, type S2SConnection, type S2SEvent, type S2SService, type S2STurnRef } from '../../processors/s2s/s2s-service.ts';
import { resolveOptions } from '../../core/options.ts';

export const OPENAI_REALTIME_SESSION_DEFAULTS = {
  model: 'gpt-realtime',
  /** The API's PCM rate, both directions. */
  sampleRate: 24_000,
  /** session.created and session.updated must both arrive within this (ms). */
  connectTimeoutMs: 10_000,
  /** Input transcription model: user transcripts come from it (none without it). */
  transcriptionModel: 'gpt-4o-mini-transcribe',
  turnDetection: { type: 'server_vad' } as Record<string, unknown>,
} as const;

export interface OpenAIRealtimeServiceOptions {
  /** REST base URL (the socket goes to the same host over wss://). */
  baseURL?: string;
  /** Extra TLS trust for the socket (a local server with its own certificate). */
  tls?: { ca?: string | Buffer };
  defaultModel?: string;
  connectTimeoutMs?: number;
}

const OPENAI_VOICE = /^[a-z]+$/;

export class OpenAIRealtimeS2SService implements S2SService {
  readonly name = 'openai-realtime';

  /** The service's settings: the session defaults with the given options over them. */
  private readonly settings: { defaultModel: string; connectTimeoutMs: number };

  constructor(private readonly options: OpenAIRealtimeServiceOptions = {}) {
    const { model, connectTimeoutMs } = resolveOptions({ model: OPENAI_REALTIME_SESSION_DEFAULTS.model, connectTimeoutMs: OPENAI_REALTIME_SESSION_DEFAULTS.connectTimeoutMs }, { model: options.defaultModel, connectTimeoutMs: options.connectTimeoutMs });
    this.settings = { defaultModel: model, connectTimeoutMs };
  }

  async connect(o: S2SConnectOptions): Promise<S2SConnection> {
    const model = o.configId || this.settings.defaultModel;
    const client = new OpenAI({ apiKey: o.apiKey, baseURL: this.options.baseURL ?? process.env.OPENAI_BASE_URL ?? undefined, maxRetries: 0 });
    const timeoutMs = this.settings.connectTimeoutMs;
    const rt = await OpenAIRealtimeWS.create(client, { model, options: { ca: this.options.tls?.ca, handshakeTimeout: timeoutMs } });
    const connection = new OpenAIRealtimeConnection(rt);
    try {
      await connection.open(sessionUpdate(o), o, timeoutMs);
    } catch (err) {
      await connection.close();
      throw err;
    }
    return connection;
  }
}

/** The GA `session.update` for an agent. */
export function sessionUpdate(o: S2SConnectOptions): Record<string, unknown> {
  const pc = o.providerConfig;
  const instructions = [o.instructions?.trim(), o.language ? languagePin(o.language) : ''].filter(Boolean).join('\n\n');
  const td = typeof pc.turn_detection === 'string' ? { type: pc.turn_detection } : isObject(pc.turn_detection) ? { ...pc.turn_detection } : { ...OPENAI_REALTIME_SESSION_DEFAULTS.turnDetection };
  const voice = typeof pc.voice === 'string' ? pc.voice : o.voiceId && OPENAI_VOICE.test(o.voiceId) ? o.voiceId : undefined;
  const rate = OPENAI_REALTIME_SESSION_DEFAULTS.sampleRate;
  const transcriptionModel = typeof pc.transcription_model === 'string' ? pc.transcription_model : OPENAI_REALTIME_SESSION_DEFAULTS.transcriptionModel;
  return {
    type: 'realtime',
    output_modalities: ['audio'],
    ...(instructions ? { instructions } : {}),
    audio: {
      input: {
        format: { type: 'audio/pcm', rate },
        transcription: { model: transcriptionModel, ...(o.language ? { language: o.language.split('-')[0] } : {}) },
        turn_detection: { ...td, create_response: true, interrupt_response: o.allowInterruptions },
      },
      output: { format: { type: 'audio/pcm', rate }, ...(voice ? { voice } : {}) },
    },
  };
}

function isObject(x: unknown): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

/** Maps an error code OpenAI sends before the session is usable onto our codes. */
function setupError(code: string | undefined, message: string): S2SError {
  if (code === 'invalid_api_key' || code === 'insufficient_quota' || code === 'unauthorized') return new S2SError('auth_failed', `OpenAI refused the key: ${message}`);
  if (code === 'model_not_found') return new S2SError('config_not_found', `OpenAI Realtime model not available: ${message}`);
  return new S2SError('bad_config', `OpenAI refused the session settings: ${message}`);
}

interface ResponseState {
  readonly ref: { turnId: string; itemId?: string };
  receivedMs: number;
  done: boolean;
  cancelled: boolean;
}

class OpenAIRealtimeConnection implements S2SConnection {
  readonly inputSampleRate = OPENAI_REALTIME_SESSION_DEFAULTS.sampleRate;
  private readonly subject = new Subject<S2SEvent>();
  readonly events = this.subject.asObservable();
  private readonly responses = new Map<string, ResponseState>();
  private ready = false;
  private closing = false;
  private failed = false;
  private lastError: { code?: string; message: string } | undefined;
  private setup: { resolve: () => void; reject: (e: unknown) => void; stage: 'created' | 'updated' } | undefined;

  constructor(private readonly rt: OpenAIRealtimeWS) {
    rt.on('event', (event: any) => this.onEvent(event));
    // The SDK reports socket errors, unparseable messages and `error` events here.
    rt.on('error', (err: any) => {
      if (err?.error) return; // an `error` event: handled in onEvent
      if (/could not parse/.test(String(err?.message))) return; // a malformed message is skipped
      this.lastError = { message: String(err?.message ?? err) };
    });
    rt.socket.on('unexpected-response', (req, res) => {
      const status = res.statusCode ?? 0;
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString('utf8')));
      res.on('end', () => {
        const msg = (() => {
          try {
            return JSON.parse(body)?.error?.message ?? body;
          } catch {
            return body;
          }
        })();
        const code = status === 401 || status === 403 ? 'auth_failed' : status === 404 ? 'config_not_found' : 'connect_failed';
        this.failSetup(new S2SError(code, `OpenAI Realtime refused the connection (${status}): ${msg}`, status));
        req.destroy();
      });
    });
    rt.socket.on('close', (code, reason) => this.onClose(code, reason.toString()));
  }

  async open(session: Record<string, unknown>, o: S2SConnectOptions, timeoutMs: number): Promise<void> {
    const timer = setTimeout(() => this.failSetup(new S2SError('timeout', `OpenAI Realtime did not accept the session within ${timeoutMs} ms`)), timeoutMs);
    const onAbort = () => this.failSetup(new S2SError('connect_failed', 'connection aborted'));
    o.signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await new Promise<void>((resolve, reject) => (this.setup = { resolve, reject, stage: 'created' }));
      await new Promise<void>((resolve, reject) => {
        this.setup = { resolve, reject, stage: 'updated' };
        this.rt.send({ type: 'session.update', session } as any);
      });
    } finally {
      clearTimeout(timer);
      o.signal?.removeEventListener('abort', onAbort);
      this.setup = undefined;
    }
    this.ready = true;
    this.subject.next({ type: 'ready', inputSampleRate: this.inputSampleRate, outputSampleRate: OPENAI_REALTIME_SESSION_DEFAULTS.sampleRate });
    for (const h of o.history ?? []) {
      const content = [{ type: h.role === 'user' ? 'input_text' : 'output_text', text: h.text }];
      this.rt.send({ type: 'conversation.item.create', item: { type: 'message', role: h.role, content } } as any);
    }
    if (!o.resumed && o.greeting !== undefined && o.greeting !== null) {
      const instructions = o.greeting.trim() ? `Greet the user by saying exactly: "${o.greeting.trim()}"` : 'Greet the user to open the conversation, in one short sentence.';
      this.rt.send({ type: 'response.create', response: { instructions } } as any);
    }
  }

  sendAudio(pcm: Int16Array): void {
    if (!this.ready || this.closing || this.rt.socket.readyState !== this.rt.socket.OPEN) return;
    this.rt.send({ type: 'input_audio_buffer.append', audio: Buffer.from(int16ToBytes(pcm)).toString('base64') });
  }

  addContext(text: string): void {
    if (!this.ready || this.closing) return;
    this.rt.send({ type: 'conversation.item.create', item: { type: 'message', role: 'system', content: [{ type: 'input_text', text }] } } as any);
  }

  interrupted(turn: S2STurnRef, playedMs: number, cancelResponse: boolean): void {
    const state = this.responses.get(turn.turnId);
    if (state) state.cancelled = true;
    if (!this.ready || this.closing) return;
    if (cancelResponse && state && !state.done) this.rt.send({ type: 'response.cancel' });
    const itemId = state?.ref.itemId ?? turn.itemId;
    if (!itemId) return;
    // What the user heard, never more than the item's audio (the API refuses that).
    const audioEndMs = Math.max(0, Math.min(Math.round(playedMs), Math.floor(state?.receivedMs ?? playedMs)));
    this.rt.send({ type: 'conversation.item.truncate', item_id: itemId, content_index: 0, audio_end_ms: audioEndMs });
  }

  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    const socket = this.rt.socket;
    if (socket.readyState === socket.CLOSED) return this.subject.complete();
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        socket.terminate();
        resolve();
      }, 1_000);
      socket.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
      if (socket.readyState === socket.CONNECTING) socket.terminate();
      else this.rt.close({ code: 1000, reason: 'session ended' });
    });
    this.subject.complete();
  }

  private failSetup(err: S2SError): void {
    if (this.setup) {
      const s = this.setup;
      this.setup = undefined;
      s.reject(err);
    }
  }

  private onClose(code: number, reason: string): void {
    if (this.closing) return;
    if (this.setup) {
      // Refusals come as an `error` event, then close 3000 `invalid_request_error.<code>`.
      const errCode = /invalid_request_error\.(\w+)/.exec(reason)?.[1] ?? this.lastError?.code;
      if (errCode) return this.failSetup(setupError(errCode, this.lastError?.message ?? reason));
      return this.failSetup(new S2SError('connect_failed', `OpenAI Realtime connection failed: ${this.lastError?.message ?? `closed ${code} ${reason}`}`));
    }
    if (this.failed) return;
    this.failed = true;
    this.subject.error(new S2SError('connection_lost', `OpenAI Realtime connection lost (close ${code}${reason ? ` ${reason}` : ''})`));
  }

  private onEvent(e: any): void {
    if (!e || typeof e.type !== 'string') return;
    try {
      this.handle(e);
    } catch {
      // A well-formed JSON message with unexpected fields is skipped, never fatal.
    }
  }

  private handle(e: any): void {
    switch (e.type) {
      case 'session.created':
        if (this.setup?.stage === 'created') this.setup.resolve();
        return;
      case 'session.updated':
        if (this.setup?.stage === 'updated') this.setup.resolve();
        return;
      case 'error': {
        const code: string | undefined = e.error?.code ?? undefined;
        const message: string = e.error?.message ?? 'unknown error';
        this.lastError = { code, message };
        if (this.setup) {
          // Before the session is ready: a refused key/model closes the socket next; a refused
          // session.update does not, so fail at once.
          if (this.setup.stage === 'updated') this.failSetup(setupError(code, message));
          return;
        }
        this.subject.next({ type: 'warning', code: 'provider_warning', message: `OpenAI Realtime: ${message}${code ? ` (${code})` : ''}` });
        return;
      }
      case 'input_audio_buffer.speech_started':
        return this.subject.next({ type: 'user-started-speaking' });
      case 'input_audio_buffer.speech_stopped':
        return this.subject.next({ type: 'user-stopped-speaking' });
      case 'conversation.item.input_audio_transcription.delta':
        if (typeof e.delta === 'string' && e.delta) this.subject.next({ type: 'user-transcript', text: e.delta, final: false });
        return;
      case 'conversation.item.input_audio_transcription.completed':
        if (typeof e.transcript === 'string') this.subject.next({ type: 'user-transcript', text: e.transcript, final: true });
        return;
      case 'response.created': {
        const id = e.response?.id;
        if (typeof id !== 'string') return;
        const state: ResponseState = { ref: { turnId: id }, receivedMs: 0, done: false, cancelled: false };
        this.responses.set(id, state);
        if (this.responses.size > 32) this.responses.delete(this.responses.keys().next().value!);
        return this.subject.next({ type: 'bot-turn-started', turn: { ...state.ref } });
      }
      case 'response.output_item.added': {
        const state = this.responses.get(e.response_id);
        if (state && e.item?.type === 'message' && typeof e.item.id === 'string' && !state.ref.itemId) state.ref.itemId = e.item.id;
        return;
      }
      case 'response.output_audio.delta':
      case 'response.audio.delta': {
        const state = this.response(e);
        if (!state || state.cancelled || typeof e.delta !== 'string') return;
        const bytes = Buffer.from(e.delta, 'base64');
        const pcm = bytesToInt16(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength & ~1));
        if (!pcm.length) return;
        state.receivedMs += (pcm.length / OPENAI_REALTIME_SESSION_DEFAULTS.sampleRate) * 1000;
        return this.subject.next({ type: 'bot-audio', turn: { ...state.ref }, pcm, sampleRate: OPENAI_REALTIME_SESSION_DEFAULTS.sampleRate });
      }
      case 'response.output_audio_transcript.delta':
      case 'response.audio_transcript.delta': {
        const state = this.response(e);
        if (state && !state.cancelled && typeof e.delta === 'string') this.subject.next({ type: 'bot-transcript', turn: { ...state.ref }, text: e.delta, final: false });
        return;
      }
      case 'response.output_audio_transcript.done':
      case 'response.audio_transcript.done': {
        const state = this.response(e);
        if (state && !state.cancelled && typeof e.transcript === 'string') this.subject.next({ type: 'bot-transcript', turn: { ...state.ref }, text: e.transcript, final: true });
        return;
      }
      case 'response.done': {
        const r = e.response ?? {};
        const state = this.responses.get(r.id);
        if (state) {
          state.done = true;
          this.subject.next({ type: 'bot-turn-ended', turn: { ...state.ref } });
        }
        const u = r.usage;
        if (u && typeof u === 'object') {
          const counters: Record<string, number> = {};
          const put = (k: string, v: unknown) => typeof v === 'number' && Number.isFinite(v) && (counters[k] = v);
          put('input_tokens', u.input_tokens);
          put('output_tokens', u.output_tokens);
          put('input_audio_tokens', u.input_token_details?.audio_tokens);
          put('output_audio_tokens', u.output_token_details?.audio_tokens);
          put('input_cached_tokens', u.input_token_details?.cached_tokens);
          if (Object.keys(counters).length) this.subject.next({ type: 'usage', counters });
        }
        if (r.status === 'failed') {
          const detail = r.status_details?.error?.message ?? r.status_details?.reason ?? 'response failed';
          this.subject.next({ type: 'warning', code: 'response_failed', message: `OpenAI Realtime response ${r.id} failed: ${detail}` });
        }
        return;
      }
      default:
        return;
    }
  }

  /** The response of an event carrying `response_id`; the item id is learned from the first audio. */
  private response(e: any): ResponseState | undefined {
    const state = this.responses.get(e.response_id);
    if (state && !state.ref.itemId && typeof e.item_id === 'string') state.ref.itemId = e.item_id;
    return state;
  }
}
