/**
 * Local stand-in for the OpenAI Realtime API over WebSocket (`wss://…/v1/realtime?model=…`), GA
 * event names by default (`beta: true` speaks the beta spellings), plus the Models REST endpoint
 * the live verify uses. The openai SDK forces `wss://` for the realtime socket while its REST
 * calls follow the base URL, so the fake serves TLS and plain HTTP on one port; tests pass the
 * fake's certificate (`ca`) to the plugin.
 *
 * Protocol as the service speaks it: `Authorization: Bearer <key>`; a wrong key or an unknown
 * model is accepted at the handshake, then answered with an `error` event
 * (`invalid_api_key` / `model_not_found`) and a close with code 3000 and reason
 * `invalid_request_error.<code>`. `session.created` first; `session.update` answered by
 * `session.updated` (a beta-shaped session on a GA connection is refused with
 * `unknown_parameter`); server VAD on `input_audio_buffer.append` (24 kHz PCM16, base64):
 * `speech_started` / `speech_stopped` / `committed` / `conversation.item.added`, the input
 * transcription when configured, then a response after `responseDelayMs`: `response.created`,
 * `response.output_item.added`, `response.output_audio.delta` (base64, `audioChunkMs` each) and
 * `response.output_audio_transcript.delta` (a word each), the `.done` events and `response.done`
 * with usage. Speech during a response cancels it (`response.done` status `cancelled`) when
 * `interrupt_response` is not false. `conversation.item.truncate` is checked against the
 * item's audio and answered with `conversation.item.truncated`; `response.cancel`,
 * `response.create`, `conversation.item.create`, `input_audio_buffer.clear` are handled.
 *
 * Faults: `lateDeltasAfterCancel` deltas of a cancelled response still sent (in flight on the
 * wire), `dropAfterDeltas` (the socket is destroyed mid-response), `malformedAt` (a non-JSON
 * message before the n-th delta). Honest limits: no recogniser (user transcripts come from
 * `userTranscripts`), replies are scripted, audio is the fake voice of the reply text.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { WebSocketServer, type WebSocket } from 'ws';
import { EnergyTurnDetector, fakeBotVoice, listenPolyglot, selfSignedCertificate } from './s2s-turns.ts';
import { Pacing } from './pacing.ts';

export const OPENAI_REALTIME_FAKE_DEFAULTS = {
  apiKey: 'sk-realtime-fake-key',
  models: ['gpt-realtime', 'gpt-4o-realtime-preview'] as readonly string[],
  /** Fixed latency: end of user speech (or response.create) -> first audio delta (ms). */
  responseDelayMs: 50,
  /** Audio per delta (ms). */
  audioChunkMs: 100,
  /** Wait between deltas (ms); 0 sends a response faster than real time, as the service does. */
  deltaIntervalMs: 0,
  beta: false,
} as const;

export interface OpenAIRealtimeFakeOptions {
  apiKey?: string;
  models?: readonly string[];
  responseDelayMs?: number;
  audioChunkMs?: number;
  deltaIntervalMs?: number;
  beta?: boolean;
  /** Reply texts, used in order; then `You said something.` */
  replies?: string[];
  /** User transcripts, used in order per committed turn; then `hello`. */
  userTranscripts?: string[];
  lateDeltasAfterCancel?: number;
  dropAfterDeltas?: number;
  malformedAt?: number;
}

export interface RealtimeConnectionRecord {
  model: string;
  token: string | null;
  /** Every client event received, parsed. */
  events: any[];
  /** Input audio received (ms at 24 kHz). */
  audioMs: number;
  truncates: Array<{ item_id: string; content_index: number; audio_end_ms: number; itemAudioMs: number }>;
  /** Server events sent, in order (types only). */
  sent: string[];
}

export interface OpenAIRealtimeFake {
  /** Pass to the SDK as `baseURL` (http, ends in /v1); the socket goes to wss:// on the same port. */
  readonly baseURL: string;
  /** Certificate of the TLS side, for the plugin's `tls.ca`. */
  readonly ca: string;
  readonly apiKey: string;
  readonly connections: RealtimeConnectionRecord[];
  readonly restRequests: Array<{ method: string; path: string; token: string | null }>;
  enqueue(...replies: string[]): void;
  setFaults(faults: { lateDeltasAfterCancel?: number; dropAfterDeltas?: number; malformedAt?: number }): void;
  /** Sends raw text on every open realtime socket (malformed or unexpected messages). */
  injectRaw(text: string): void;
  /** Destroys every open realtime socket (a network drop). */
  dropAll(): void;
  /** Wall-clock times (performance.now) of the first delta of each response and of each cancel. */
  readonly timeline: Array<{ kind: 'first-delta' | 'cancelled' | 'speech-started' | 'speech-stopped' | 'late-delta'; at: number; responseId: string }>;
  close(): Promise<void>;
}

const RATE = 24_000;

export async function startOpenAIRealtimeFake(options: OpenAIRealtimeFakeOptions = {}): Promise<OpenAIRealtimeFake> {
  const cfg = { ...OPENAI_REALTIME_FAKE_DEFAULTS, ...options };
  const replies = [...(options.replies ?? [])];
  const userTranscripts = [...(options.userTranscripts ?? [])];
  const connections: RealtimeConnectionRecord[] = [];
  const restRequests: OpenAIRealtimeFake['restRequests'] = [];
  const timeline: OpenAIRealtimeFake['timeline'] = [];
  const live = new Set<WebSocket>();
  let faults = { lateDeltasAfterCancel: options.lateDeltasAfterCancel ?? 0, dropAfterDeltas: options.dropAfterDeltas, malformedAt: options.malformedAt };
  let seq = 0;
  const id = (prefix: string) => `${prefix}_${(++seq).toString(36).padStart(6, '0')}`;
  const wss = new WebSocketServer({ noServer: true });
  const names = cfg.beta
    ? { audioDelta: 'response.audio.delta', audioDone: 'response.audio.done', trDelta: 'response.audio_transcript.delta', trDone: 'response.audio_transcript.done', itemAdded: 'conversation.item.created' }
    : { audioDelta: 'response.output_audio.delta', audioDone: 'response.output_audio.done', trDelta: 'response.output_audio_transcript.delta', trDone: 'response.output_audio_transcript.done', itemAdded: 'conversation.item.added' };

  function openAIError(res: ServerResponse, status: number, message: string, code: string | null): void {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code } }));
  }

  const bearer = (req: IncomingMessage) => /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? null;
  const masked = (key: string) => `${key.slice(0, 3)}*****${key.slice(-4)}`;

  function onRequest(req: IncomingMessage, res: ServerResponse): void {
    const path = new URL(req.url ?? '/', 'http://fake').pathname;
    const token = bearer(req);
    restRequests.push({ method: req.method ?? 'GET', path, token });
    if (token !== cfg.apiKey) return openAIError(res, 401, `Incorrect API key provided: ${masked(token ?? '')}. You can find your API key at https://platform.openai.com/account/api-keys.`, 'invalid_api_key');
    const m = /^\/v1\/models\/(.+)$/.exec(path);
    if (req.method === 'GET' && m) {
      const model = decodeURIComponent(m[1]!);
      if (!cfg.models.includes(model)) return openAIError(res, 404, `The model '${model}' does not exist or you do not have access to it.`, 'model_not_found');
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end(JSON.stringify({ id: model, object: 'model', created: 1_715_367_049, owned_by: 'system' }));
    }
    openAIError(res, 404, `Invalid URL (${req.method} ${path})`, null);
  }

  function onUpgrade(req: IncomingMessage, socket: import('node:stream').Duplex, head: Buffer): void {
    const url = new URL(req.url ?? '/', 'http://fake');
    if (url.pathname !== '/v1/realtime') {
      socket.end('HTTP/1.1 404 Not Found\r\n\r\n');
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => serve(ws, url.searchParams.get('model') ?? '', bearer(req)));
  }

  function serve(ws: WebSocket, model: string, token: string | null): void {
    live.add(ws);
    ws.on('close', () => live.delete(ws));
    const record: RealtimeConnectionRecord = { model, token, events: [], audioMs: 0, truncates: [], sent: [] };
    connections.push(record);
    const send = (event: Record<string, unknown>) => {
      if (ws.readyState !== ws.OPEN) return;
      record.sent.push(String(event.type));
      ws.send(JSON.stringify({ event_id: id('event'), ...event }));
    };
    const refuse = (code: string, message: string) => {
      send({ type: 'error', error: { type: 'invalid_request_error', code, message, param: null, event_id: null } });
      ws.close(3000, `invalid_request_error.${code}`);
    };
    if (token !== cfg.apiKey) return refuse('invalid_api_key', `Incorrect API key provided: ${masked(token ?? '')}. You can find your API key at https://platform.openai.com/account/api-keys.`);
    if (!cfg.models.includes(model)) return refuse('model_not_found', `The model '${model}' does not exist or you do not have access to it.`);

    const session: Record<string, any> = {
      type: 'realtime', object: 'realtime.session', id: id('sess'), model, output_modalities: ['audio'], instructions: '',
      audio: {
        input: { format: { type: 'audio/pcm', rate: RATE }, transcription: null, noise_reduction: null, turn_detection: { type: 'server_vad', threshold: 0.5, prefix_padding_ms: 300, silence_duration_ms: 500, create_response: true, interrupt_response: true } },
        output: { format: { type: 'audio/pcm', rate: RATE }, voice: 'alloy', speed: 1 },
      },
    };
    let detector = new EnergyTurnDetector(RATE, { silenceMs: 500 });
    let userItem: string | undefined;
    let lastItem: string | null = null;
    const items = new Map<string, { audioMs: number }>();
    let active: { id: string; itemId: string; cancelled: boolean; timer?: NodeJS.Timeout } | undefined;
    let deltasSent = 0;
    const timers = new Set<NodeJS.Timeout>();
    const later = (fn: () => void, ms: number) => {
      const t = setTimeout(() => {
        timers.delete(t);
        fn();
      }, ms);
      timers.add(t);
      return t;
    };
    ws.on('close', () => {
      for (const t of timers) clearTimeout(t);
      timers.clear();
    });

    send({ type: 'session.created', session });

    const turnDetection = () => session.audio.input.turn_detection as Record<string, any> | null;

    function startResponse(instructions?: string): void {
      if (active && !active.cancelled) return send({ type: 'error', error: { type: 'invalid_request_error', code: 'conversation_already_has_active_response', message: 'Conversation already has an active response in progress', param: null } });
      const response = { id: id('resp'), itemId: id('item'), cancelled: false } as NonNullable<typeof active>;
      active = response;
      const text = replies.shift() ?? (instructions ? `Greeting as asked.` : 'You said something.');
      const pcm = fakeBotVoice(text, RATE);
      const words = text.split(/\s+/);
      const chunk = Math.round((cfg.audioChunkMs / 1000) * RATE);
      items.set(response.itemId, { audioMs: (pcm.length / RATE) * 1000 });
      send({ type: 'response.created', response: { object: 'realtime.response', id: response.id, status: 'in_progress', output: [] } });
      send({ type: 'response.output_item.added', response_id: response.id, output_index: 0, item: { id: response.itemId, object: 'realtime.item', type: 'message', role: 'assistant', status: 'in_progress', content: [] } });
      send({ type: names.itemAdded, previous_item_id: lastItem, item: { id: response.itemId, object: 'realtime.item', type: 'message', role: 'assistant', status: 'in_progress', content: [] } });
      lastItem = response.itemId;
      send({ type: 'response.content_part.added', response_id: response.id, item_id: response.itemId, output_index: 0, content_index: 0, part: { type: 'audio', transcript: '' } });
      let offset = 0;
      let word = 0;
      let late = -1;
      // Deltas on a fixed timeline from the first (test/fakes/pacing.ts).
      const pacing = new Pacing(() => performance.now(), cfg.deltaIntervalMs);
      const step = () => {
        if (ws.readyState !== ws.OPEN) return;
        if (response.cancelled) {
          if (late < 0) late = faults.lateDeltasAfterCancel;
          if (late-- <= 0 || offset >= pcm.length) return finish('cancelled');
        }
        if (offset >= pcm.length) return finish('completed');
        deltasSent++;
        if (faults.malformedAt !== undefined && deltasSent === faults.malformedAt) ws.send('{"type":"response.output_audio.delta", "delta": <not json');
        if (faults.dropAfterDeltas !== undefined && deltasSent > faults.dropAfterDeltas) {
          ws.terminate();
          return;
        }
        const part = pcm.subarray(offset, offset + chunk);
        if (response.cancelled) timeline.push({ kind: 'late-delta', at: performance.now(), responseId: response.id });
        if (offset === 0) timeline.push({ kind: 'first-delta', at: performance.now(), responseId: response.id });
        offset += part.length;
        send({ type: names.audioDelta, response_id: response.id, item_id: response.itemId, output_index: 0, content_index: 0, delta: Buffer.from(part.buffer, part.byteOffset, part.byteLength).toString('base64') });
        if (word < words.length) send({ type: names.trDelta, response_id: response.id, item_id: response.itemId, output_index: 0, content_index: 0, delta: (word ? ' ' : '') + words[word++] });
        pacing.slot();
        later(step, pacing.untilNext());
      };
      const finish = (status: 'completed' | 'cancelled') => {
        if (status === 'completed') {
          send({ type: names.audioDone, response_id: response.id, item_id: response.itemId, output_index: 0, content_index: 0 });
          send({ type: names.trDone, response_id: response.id, item_id: response.itemId, output_index: 0, content_index: 0, transcript: text });
          send({ type: 'response.content_part.done', response_id: response.id, item_id: response.itemId, output_index: 0, content_index: 0, part: { type: 'audio', transcript: text } });
        }
        send({ type: 'response.output_item.done', response_id: response.id, output_index: 0, item: { id: response.itemId, type: 'message', role: 'assistant', status: status === 'completed' ? 'completed' : 'incomplete' } });
        send({
          type: 'response.done',
          response: {
            object: 'realtime.response', id: response.id, status,
            status_details: status === 'cancelled' ? { type: 'cancelled', reason: 'turn_detected' } : null,
            usage: { total_tokens: 60 + words.length * 3, input_tokens: 50, output_tokens: 10 + words.length * 3, input_token_details: { audio_tokens: 40, text_tokens: 10, cached_tokens: 0 }, output_token_details: { audio_tokens: words.length * 2 + 10, text_tokens: words.length } },
          },
        });
        if (active === response) active = undefined;
      };
      response.timer = later(step, cfg.responseDelayMs);
    }

    function cancelActive(reason: 'turn_detected' | 'client_cancelled'): boolean {
      if (!active || active.cancelled) return false;
      active.cancelled = true;
      timeline.push({ kind: 'cancelled', at: performance.now(), responseId: active.id });
      // Not started yet: nothing in flight, finish at once.
      if (active.timer && !timeline.some((t) => t.kind === 'first-delta' && t.responseId === active!.id)) {
        clearTimeout(active.timer);
        const r = active;
        active = undefined;
        send({ type: 'response.done', response: { object: 'realtime.response', id: r.id, status: 'cancelled', status_details: { type: 'cancelled', reason }, usage: null } });
      }
      return true;
    }

    ws.on('message', (data, isBinary) => {
      let event: any;
      try {
        event = JSON.parse(isBinary ? '' : data.toString());
      } catch {
        return send({ type: 'error', error: { type: 'invalid_request_error', code: 'invalid_json', message: "The server had an error while processing your request: 'Invalid JSON'", param: null } });
      }
      record.events.push(event);
      const error = (code: string, message: string) => send({ type: 'error', error: { type: 'invalid_request_error', code, message, param: null, event_id: event.event_id ?? null } });
      switch (event.type) {
        case 'session.update': {
          const s = event.session ?? {};
          if (!cfg.beta && s.type !== 'realtime') return error('missing_required_parameter', "Missing required parameter: 'session.type'.");
          for (const beta of ['modalities', 'input_audio_format', 'output_audio_format', 'turn_detection', 'voice', 'input_audio_transcription']) {
            if (!cfg.beta && beta in s) return error('unknown_parameter', `Unknown parameter: 'session.${beta}'.`);
          }
          if (s.instructions !== undefined) session.instructions = s.instructions;
          if (s.output_modalities) session.output_modalities = s.output_modalities;
          if (s.audio?.input) {
            const td = s.audio.input.turn_detection;
            if (td && td.type !== 'server_vad' && td.type !== 'semantic_vad') return error('invalid_value', `Invalid value: '${td.type}'. Supported values are: 'server_vad' and 'semantic_vad'.`);
            Object.assign(session.audio.input, s.audio.input);
            if (td?.silence_duration_ms) detector = new EnergyTurnDetector(RATE, { silenceMs: td.silence_duration_ms });
          }
          if (s.audio?.output) Object.assign(session.audio.output, s.audio.output);
          return send({ type: 'session.updated', session });
        }
        case 'input_audio_buffer.append': {
          if (typeof event.audio !== 'string') return error('missing_required_parameter', "Missing required parameter: 'audio'.");
          const bytes = Buffer.from(event.audio, 'base64');
          const pcm = new Int16Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + (bytes.byteLength & ~1)));
          record.audioMs += (pcm.length / RATE) * 1000;
          const td = turnDetection();
          if (!td) return;
          for (const e of detector.push(pcm)) {
            if (e.type === 'start') {
              userItem = id('item');
              timeline.push({ kind: 'speech-started', at: performance.now(), responseId: active?.id ?? '' });
              send({ type: 'input_audio_buffer.speech_started', audio_start_ms: e.atMs, item_id: userItem });
              if (td.interrupt_response !== false) cancelActive('turn_detected');
            } else {
              const item = userItem ?? id('item');
              timeline.push({ kind: 'speech-stopped', at: performance.now(), responseId: '' });
              send({ type: 'input_audio_buffer.speech_stopped', audio_end_ms: e.atMs, item_id: item });
              send({ type: 'input_audio_buffer.committed', previous_item_id: lastItem, item_id: item });
              send({ type: names.itemAdded, previous_item_id: lastItem, item: { id: item, object: 'realtime.item', type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_audio', transcript: null }] } });
              lastItem = item;
              if (session.audio.input.transcription) {
                const transcript = userTranscripts.shift() ?? 'hello';
                send({ type: 'conversation.item.input_audio_transcription.delta', item_id: item, content_index: 0, delta: transcript });
                send({ type: 'conversation.item.input_audio_transcription.completed', item_id: item, content_index: 0, transcript, usage: { type: 'duration', seconds: 1 } });
              }
              if (td.create_response !== false) startResponse();
            }
          }
          return;
        }
        case 'input_audio_buffer.clear':
          return send({ type: 'input_audio_buffer.cleared' });
        case 'input_audio_buffer.commit':
          return send({ type: 'input_audio_buffer.committed', previous_item_id: lastItem, item_id: id('item') });
        case 'response.create':
          return startResponse(event.response?.instructions);
        case 'response.cancel':
          if (!cancelActive('client_cancelled')) error('response_cancel_not_active', 'Cancellation failed: no active response found');
          return;
        case 'conversation.item.create': {
          const itemId = event.item?.id ?? id('item');
          send({ type: names.itemAdded, previous_item_id: lastItem, item: { ...event.item, id: itemId, status: 'completed' } });
          lastItem = itemId;
          return;
        }
        case 'conversation.item.truncate': {
          const item = items.get(event.item_id);
          if (!item) return error('item_truncate_invalid_item_id', `Item with item_id '${event.item_id}' not found`);
          if (typeof event.audio_end_ms !== 'number' || event.audio_end_ms < 0) return error('invalid_value', 'Invalid audio_end_ms');
          if (event.audio_end_ms > item.audioMs) {
            return error('invalid_value', `Audio content of ${Math.round(item.audioMs)}ms is already shorter than ${event.audio_end_ms}ms`);
          }
          record.truncates.push({ item_id: event.item_id, content_index: event.content_index, audio_end_ms: event.audio_end_ms, itemAudioMs: item.audioMs });
          item.audioMs = event.audio_end_ms;
          return send({ type: 'conversation.item.truncated', item_id: event.item_id, content_index: event.content_index ?? 0, audio_end_ms: event.audio_end_ms });
        }
        default:
          return error('invalid_value', `Invalid value: '${event.type}'.`);
      }
    });
  }

  const listener = await listenPolyglot(onRequest, onUpgrade);
  return {
    baseURL: `http://127.0.0.1:${listener.port}/v1`,
    ca: selfSignedCertificate().cert,
    apiKey: cfg.apiKey,
    connections,
    restRequests,
    timeline,
    enqueue: (...r) => void replies.push(...r),
    setFaults: (f) => void (faults = { ...faults, ...f }),
    dropAll: () => {
      for (const ws of live) ws.terminate();
    },
    injectRaw: (text) => {
      for (const ws of live) ws.send(text);
    },
    close: async () => {
      for (const ws of live) ws.terminate();
      wss.close();
      await listener.close();
    },
  };
}
