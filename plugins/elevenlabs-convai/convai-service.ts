/**
 * ElevenLabs Conversational AI (Agents) as an `S2SService`. The `elevenlabs` SDK (v1.59) has the
 * REST half (`conversationalAi.getSignedUrl`, `getAgent`) but no client for the conversation
 * socket, so the signed URL comes from the SDK and the socket is `ws` speaking the documented
 * protocol: `conversation_initiation_client_data` first, `conversation_initiation_metadata`
 * back (audio formats), `user_audio_chunk` (base64 PCM16 at the input rate), `audio` /
 * `agent_response` / `user_transcript` / `interruption` / `vad_score` / `ping` in.
 *
 * Interruption, ElevenLabs' rule: after `interruption` with event_id N, any `audio` with
 * event_id <= N is stale (it was in flight) and is dropped here, before it can reach the face.
 *
 * Turns: the API has no "audio done" event. A bot turn is the audio of one response event id;
 * it ends at a new response, a user transcript, an interruption, or `turnGapMs` without audio.
 *
 * Agent fields: `sts_config_id` = the ElevenLabs agent id (required). The ElevenLabs agent owns
 * its prompt, voice, language and first message; ours are sent as
 * `conversation_config_override` only with `provider_config.override_agent_settings: true`
 * (ElevenLabs refuses overrides the agent's security settings do not allow, and ends the
 * conversation). `provider_config.dynamic_variables` and `user_id` are passed through.
 */
import { ElevenLabsClient, ElevenLabsError, ElevenLabsTimeoutError } from 'elevenlabs';
import { Observable, Subject } from 'rxjs';
import WebSocket from 'ws';
import { bytesToInt16, int16ToBytes } from '../../core/audio.ts';
import { S2SError, type S2SConnectOptions, type S2SConnection, type S2SEvent, type S2SService, type S2STurnRef } from '../../processors/s2s/s2s-service.ts';
import { resolveOptions } from '../../core/options.ts';
import { errorMessage } from '../../core/error-message.ts';

export const ELEVENLABS_CONVAI_DEFAULTS = {
  baseUrl: 'https://api.elevenlabs.io',
  /** Signed URL + socket + conversation metadata must all arrive within this (ms). */
  connectTimeoutMs: 10_000,
  /** No audio for this long ends the bot turn (the API sends no end-of-audio event). */
  turnGapMs: 600,
  /** `vad_score` at or above this means the user is speaking. */
  vadThreshold: 0.5,
} as const;

export interface ElevenLabsConvaiServiceOptions {
  baseUrl?: string;
  connectTimeoutMs?: number;
  turnGapMs?: number;
}

export class ElevenLabsConvaiS2SService implements S2SService {
  readonly name = 'elevenlabs-convai';

  /** The service's settings: ELEVENLABS_CONVAI_DEFAULTS with the given options over them. */
  private readonly settings: { baseUrl: string; connectTimeoutMs: number; turnGapMs: number };

  constructor(options: ElevenLabsConvaiServiceOptions = {}) {
    const { baseUrl, connectTimeoutMs, turnGapMs } = resolveOptions(ELEVENLABS_CONVAI_DEFAULTS, options);
    this.settings = { baseUrl, connectTimeoutMs, turnGapMs };
  }

  async connect(o: S2SConnectOptions): Promise<S2SConnection> {
    const agentId = o.configId?.trim();
    if (!agentId) throw new S2SError('config_not_found', 'sts_config_id must be the ElevenLabs agent id');
    const timeoutMs = this.settings.connectTimeoutMs;
    const client = new ElevenLabsClient({ apiKey: o.apiKey, baseUrl: this.settings.baseUrl });
    let signedUrl: string;
    try {
      const res = await client.conversationalAi.getSignedUrl({ agent_id: agentId }, { maxRetries: 0, timeoutInSeconds: timeoutMs / 1000, abortSignal: o.signal });
      signedUrl = res.signed_url;
    } catch (err) {
      throw restError(err, agentId);
    }
    const connection = new ConvaiConnection(signedUrl, this.settings.turnGapMs);
    try {
      await connection.open(initiation(o), timeoutMs, o.signal);
      if (o.history?.length) connection.sendContext(`Earlier in this conversation:\n${o.history.map((h) => `${h.role === 'user' ? 'User' : 'Agent'}: ${h.text}`).join('\n')}`);
    } catch (err) {
      await connection.close();
      throw err;
    }
    return connection;
  }
}

/** The `conversation_initiation_client_data` for an agent. */
export function initiation(o: S2SConnectOptions): Record<string, unknown> {
  const pc = o.providerConfig;
  const msg: Record<string, unknown> = { type: 'conversation_initiation_client_data' };
  if (pc.override_agent_settings === true) {
    const agent: Record<string, unknown> = {};
    if (o.instructions?.trim()) agent.prompt = { prompt: o.instructions.trim() };
    if (o.language) agent.language = o.language.split('-')[0];
    // A reconnect mid-call: no first message at all (the agent's own configured one included).
    if (o.resumed) agent.first_message = '';
    else if (o.greeting) agent.first_message = o.greeting;
    const override: Record<string, unknown> = { agent };
    if (o.voiceId) override.tts = { voice_id: o.voiceId };
    msg.conversation_config_override = override;
  }
  if (pc.dynamic_variables && typeof pc.dynamic_variables === 'object' && !Array.isArray(pc.dynamic_variables)) msg.dynamic_variables = pc.dynamic_variables;
  if (typeof pc.user_id === 'string') msg.user_id = pc.user_id;
  return msg;
}

function restError(err: unknown, agentId: string): S2SError {
  if (err instanceof ElevenLabsTimeoutError) return new S2SError('timeout', `ElevenLabs did not answer in time: ${err.message}`);
  if (err instanceof ElevenLabsError) {
    const status = err.statusCode;
    const body = err.body as any;
    const detail = typeof body?.detail === 'object' && body.detail && !Array.isArray(body.detail) ? `${body.detail.message ?? ''} (${body.detail.status ?? status})` : JSON.stringify(body ?? err.message);
    if (status === undefined) return new S2SError('connect_failed', `could not reach ElevenLabs: ${err.message}`);
    if (status === 401 || status === 403) return new S2SError('auth_failed', `ElevenLabs refused the key: ${detail}`, status);
    if (status === 404 || status === 422) return new S2SError('config_not_found', `ElevenLabs agent "${agentId}" not available: ${detail}`, status);
    return new S2SError('connect_failed', `ElevenLabs answered ${status}: ${detail}`, status);
  }
  return new S2SError('connect_failed', `could not reach ElevenLabs: ${errorMessage(err)}`);
}

const pcmRate = (format: unknown) => {
  const m = /^pcm_(\d+)$/.exec(String(format));
  return m ? Number(m[1]) : undefined;
};

class ConvaiConnection implements S2SConnection {
  inputSampleRate = 16_000;
  private outputSampleRate = 16_000;
  private readonly subject = new Subject<S2SEvent>();
  /**
   * Events that arrived before anyone subscribed: the agent's first message can come in the same
   * socket read as the initiation metadata, before the caller of connect() has subscribed.
   * Handed to the first subscriber, in order, ahead of live events.
   */
  private early: S2SEvent[] | null = [];
  readonly events = new Observable<S2SEvent>((subscriber) => {
    const early = this.early;
    this.early = null;
    if (early) for (const e of early) subscriber.next(e);
    return this.subject.subscribe(subscriber);
  });
  private readonly ws: WebSocket;
  private ready = false;
  private closing = false;
  private failed = false;
  private setup: { resolve: () => void; reject: (e: unknown) => void } | undefined;
  /** Highest event id named by an interruption (ElevenLabs' rule: audio at or below it is stale). */
  private lastInterruptId = -1;
  private turn: { ref: S2STurnRef; eventId: number } | undefined;
  private pendingText = new Map<number, string>();
  private gapTimer: NodeJS.Timeout | undefined;
  private userSpeaking = false;
  /** Stale audio dropped by the event-id rule (diagnostics, tests). */
  droppedStaleChunks = 0;

  private emit(event: S2SEvent): void {
    if (this.early) this.early.push(event);
    else this.subject.next(event);
  }

  constructor(url: string, private readonly turnGapMs: number) {
    this.ws = new WebSocket(url);
    this.ws.on('message', (data, isBinary) => this.onMessage(isBinary ? '' : data.toString()));
    this.ws.on('error', (err) => this.failSetup(new S2SError('connect_failed', `ElevenLabs conversation socket failed: ${err.message}`)));
    this.ws.on('unexpected-response', (req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString('utf8')));
      res.on('end', () => {
        const status = res.statusCode ?? 0;
        this.failSetup(new S2SError(status === 401 || status === 403 ? 'auth_failed' : 'connect_failed', `ElevenLabs refused the conversation (${status}): ${body}`, status));
        req.destroy();
      });
    });
    this.ws.on('close', (code, reason) => this.onClose(code, reason.toString()));
  }

  async open(init: Record<string, unknown>, timeoutMs: number, signal: AbortSignal | undefined): Promise<void> {
    const timer = setTimeout(() => this.failSetup(new S2SError('timeout', `ElevenLabs did not start the conversation within ${timeoutMs} ms`)), timeoutMs);
    const onAbort = () => this.failSetup(new S2SError('connect_failed', 'connection aborted'));
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      await new Promise<void>((resolve, reject) => {
        this.setup = { resolve, reject };
        this.ws.once('open', () => this.ws.send(JSON.stringify(init)));
      });
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      this.setup = undefined;
    }
    this.ready = true;
    this.emit({ type: 'ready', inputSampleRate: this.inputSampleRate, outputSampleRate: this.outputSampleRate });
  }

  /** Earlier turns after a reconnect (a new ElevenLabs conversation): a non-interrupting context update. */
  sendContext(text: string): void {
    if (this.ready && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type: 'contextual_update', text }));
  }

  addContext(text: string): void {
    this.sendContext(text);
  }

  sendAudio(pcm: Int16Array): void {
    if (!this.ready || this.closing || this.ws.readyState !== WebSocket.OPEN) return;
    this.ws.send(JSON.stringify({ user_audio_chunk: Buffer.from(int16ToBytes(pcm)).toString('base64') }));
  }

  interrupted(turn: S2STurnRef, _playedMs: number, _cancelResponse: boolean): void {
    // ElevenLabs takes no truncation: it detects the barge-in itself and corrects its own
    // transcript. A cut from our side can only stop the audio of that response reaching us.
    const id = Number(/^el-(\d+)$/.exec(turn.turnId)?.[1]);
    if (Number.isFinite(id)) this.lastInterruptId = Math.max(this.lastInterruptId, id);
    if (this.turn?.ref.turnId === turn.turnId) this.endTurn();
  }

  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    clearTimeout(this.gapTimer);
    if (this.ws.readyState === WebSocket.CLOSED) return this.subject.complete();
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.ws.terminate();
        resolve();
      }, 1_000);
      this.ws.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
      if (this.ws.readyState === WebSocket.CONNECTING) this.ws.terminate();
      else this.ws.close(1000, 'session ended');
    });
    this.subject.complete();
  }

  private failSetup(err: S2SError): void {
    const s = this.setup;
    this.setup = undefined;
    s?.reject(err);
  }

  private onClose(code: number, reason: string): void {
    clearTimeout(this.gapTimer);
    if (this.closing) return;
    if (this.setup) {
      // 1008 with a reason: the conversation was refused (e.g. an override the agent does not allow).
      const kind = code === 1008 ? 'bad_config' : 'connect_failed';
      return this.failSetup(new S2SError(kind, `ElevenLabs ended the conversation before it started (close ${code}${reason ? `: ${reason}` : ''})`));
    }
    if (this.failed) return;
    this.failed = true;
    this.endTurn();
    const kind = code === 1008 ? 'bad_config' : 'connection_lost';
    this.subject.error(new S2SError(kind, `ElevenLabs conversation ${kind === 'bad_config' ? 'refused' : 'lost'} (close ${code}${reason ? `: ${reason}` : ''})`));
  }

  private onMessage(text: string): void {
    let msg: any;
    try {
      msg = JSON.parse(text);
    } catch {
      return; // a malformed message is skipped, never fatal
    }
    if (!msg || typeof msg.type !== 'string') return;
    try {
      this.handle(msg);
    } catch {
      // Unexpected fields in a well-formed message: skipped.
    }
  }

  private handle(msg: any): void {
    switch (msg.type) {
      case 'conversation_initiation_metadata': {
        const m = msg.conversation_initiation_metadata_event ?? {};
        const out = pcmRate(m.agent_output_audio_format);
        const inp = pcmRate(m.user_input_audio_format ?? 'pcm_16000');
        if (!out || !inp) {
          this.failSetup(new S2SError('bad_config', `the ElevenLabs agent must use PCM audio (got output ${m.agent_output_audio_format}, input ${m.user_input_audio_format}); set pcm_16000 in the agent's voice settings`));
          return;
        }
        this.outputSampleRate = out;
        this.inputSampleRate = inp;
        this.setup?.resolve();
        return;
      }
      case 'ping': {
        const id = msg.ping_event?.event_id;
        if (this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify({ type: 'pong', event_id: id }));
        return;
      }
      case 'audio': {
        const e = msg.audio_event ?? {};
        const id = Number(e.event_id);
        if (typeof e.audio_base_64 !== 'string' || !Number.isFinite(id)) return;
        if (id <= this.lastInterruptId) {
          this.droppedStaleChunks++;
          return;
        }
        if (!this.turn || this.turn.eventId !== id) {
          this.endTurn();
          this.turn = { ref: { turnId: `el-${id}` }, eventId: id };
          this.emit({ type: 'bot-turn-started', turn: this.turn.ref });
          const pending = this.pendingText.get(id);
          if (pending) this.emitText(pending);
        }
        const bytes = Buffer.from(e.audio_base_64, 'base64');
        const pcm = bytesToInt16(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength & ~1));
        if (pcm.length) this.emit({ type: 'bot-audio', turn: this.turn.ref, pcm, sampleRate: this.outputSampleRate });
        clearTimeout(this.gapTimer);
        this.gapTimer = setTimeout(() => this.endTurn(), this.turnGapMs);
        return;
      }
      case 'agent_response': {
        const e = msg.agent_response_event ?? {};
        if (typeof e.agent_response !== 'string') return;
        const id = Number(e.event_id);
        // The text may come before its audio: keep it for the turn it belongs to.
        if (this.turn && (!Number.isFinite(id) || id === this.turn.eventId)) this.emitText(e.agent_response);
        else if (Number.isFinite(id) && id > this.lastInterruptId) {
          this.pendingText.set(id, e.agent_response);
          if (this.pendingText.size > 8) this.pendingText.delete(this.pendingText.keys().next().value!);
        }
        return;
      }
      case 'user_transcript': {
        const t = msg.user_transcription_event?.user_transcript;
        if (typeof t !== 'string') return;
        this.endTurn();
        if (!this.userSpeaking) this.emit({ type: 'user-started-speaking' });
        this.userSpeaking = false;
        this.emit({ type: 'user-stopped-speaking' });
        this.emit({ type: 'user-transcript', text: t, final: true });
        return;
      }
      case 'vad_score': {
        const score = Number(msg.vad_score_event?.vad_score);
        if (!this.userSpeaking && score >= ELEVENLABS_CONVAI_DEFAULTS.vadThreshold) {
          this.userSpeaking = true;
          this.emit({ type: 'user-started-speaking' });
        }
        return;
      }
      case 'interruption': {
        const id = Number(msg.interruption_event?.event_id);
        if (Number.isFinite(id)) this.lastInterruptId = Math.max(this.lastInterruptId, id);
        const turn = this.turn?.ref;
        if (!this.userSpeaking) {
          this.userSpeaking = true;
          this.emit({ type: 'user-started-speaking' });
        }
        this.emit({ type: 'interrupted', turn });
        if (turn && this.turn!.eventId <= this.lastInterruptId) this.endTurn();
        return;
      }
      case 'client_tool_call': {
        // Tools are never dispatched on third_party agents: answer so the agent does not wait.
        const call = msg.client_tool_call ?? {};
        if (typeof call.tool_call_id === 'string' && this.ws.readyState === WebSocket.OPEN) {
          this.ws.send(JSON.stringify({ type: 'client_tool_result', tool_call_id: call.tool_call_id, result: 'Tools are not available in this session.', is_error: true }));
        }
        this.emit({ type: 'warning', code: 'tool_call_refused', message: `ElevenLabs asked for client tool "${call.tool_name}"; tools are not dispatched in third_party mode` });
        return;
      }
      case 'error': {
        const text = msg.error_event?.message ?? msg.message ?? JSON.stringify(msg).slice(0, 200);
        this.emit({ type: 'warning', code: 'provider_warning', message: `ElevenLabs: ${text}` });
        return;
      }
      default:
        return;
    }
  }

  private emitText(text: string): void {
    if (!this.turn) return;
    this.emit({ type: 'bot-transcript', turn: this.turn.ref, text, final: false });
    this.emit({ type: 'bot-transcript', turn: this.turn.ref, text, final: true });
  }

  private endTurn(): void {
    clearTimeout(this.gapTimer);
    this.gapTimer = undefined;
    const turn = this.turn;
    if (!turn) return;
    this.turn = undefined;
    this.pendingText.delete(turn.eventId);
    this.emit({ type: 'bot-turn-ended', turn: turn.ref });
  }
}
