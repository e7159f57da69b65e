/**
 * Local stand-in for ElevenLabs Conversational AI: the REST endpoints the SDK calls
 * (`GET /v1/convai/conversation/get-signed-url?agent_id=`, `GET /v1/convai/agents/{agent_id}`,
 * header `xi-api-key`) and the conversation WebSocket behind the signed URL
 * (`/v1/convai/conversation?agent_id=…&conversation_signature=…`).
 *
 * Protocol as the service speaks it: the client may send `conversation_initiation_client_data`
 * first; the server answers `conversation_initiation_metadata` (conversation id, output and
 * input audio formats `pcm_<rate>`), speaks the agent's first message if it has one, then
 * listens to `{user_audio_chunk: <base64 PCM16>}` (energy VAD in place of theirs, `vad_score`
 * events per chunk), answers each user turn with `user_transcript`, `agent_response` and
 * `audio` chunks (`audio_event.audio_base_64`, `event_id` = the response's id, growing per
 * turn), sends `ping` (answered by `pong` with the same event_id) and, when the user speaks
 * over the agent's audio (still playing by the server's real-time account), `interruption`
 * with the cut response's event_id. Overrides the agent does not allow are refused with a close
 * 1008 and the service's reason text; a wrong key is the real 401 body.
 *
 * Faults: `lateAudioAfterInterruption` chunks of the cut response still sent after the
 * interruption (in flight on the wire; the client must drop them by event_id),
 * `dropAfterChunks` (the socket is destroyed mid-response), `malformedAt` (a non-JSON message
 * before the n-th audio chunk). Limits: no recogniser (transcripts from `userTranscripts`),
 * scripted replies, audio = the fake voice of the reply text; the 404 body for an unknown agent
 * is our own wording.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import { EnergyTurnDetector, fakeBotVoice } from './s2s-turns.ts';
import { Pacing } from './pacing.ts';

export const ELEVENLABS_CONVAI_FAKE_DEFAULTS = {
  apiKey: 'xi-convai-fake-key',
  agents: { agent_fake_ada: { name: 'Ada', firstMessage: null as string | null, outputFormat: 'pcm_16000', allowOverrides: false } } as Record<string, FakeConvaiAgent>,
  /** Fixed latency: end of user speech -> first audio chunk (ms). */
  responseDelayMs: 50,
  /** Audio per chunk (ms). */
  audioChunkMs: 100,
  /** Wait between chunks (ms); 0 sends faster than real time. */
  chunkIntervalMs: 0,
  /** 0 = no pings. */
  pingIntervalMs: 0,
} as const;

export interface FakeConvaiAgent {
  name: string;
  firstMessage: string | null;
  outputFormat: string;
  allowOverrides: boolean;
}

export interface ElevenLabsConvaiFakeOptions {
  apiKey?: string;
  agents?: Record<string, FakeConvaiAgent>;
  responseDelayMs?: number;
  audioChunkMs?: number;
  chunkIntervalMs?: number;
  pingIntervalMs?: number;
  replies?: string[];
  userTranscripts?: string[];
  lateAudioAfterInterruption?: number;
  dropAfterChunks?: number;
  malformedAt?: number;
}

export interface ConvaiConnectionRecord {
  agentId: string;
  initiation: any;
  /** Every client message but audio, parsed. */
  messages: any[];
  audioMs: number;
  pongs: number[];
  /** Server messages sent, in order (types; audio with its event id). */
  sent: string[];
  interruptions: number[];
}

export interface ElevenLabsConvaiFake {
  /** The SDK's `baseUrl`. */
  readonly baseUrl: string;
  readonly apiKey: string;
  readonly connections: ConvaiConnectionRecord[];
  readonly restRequests: Array<{ method: string; path: string; key: string | null }>;
  /** Event ids of audio chunks sent after an interruption of their response. */
  readonly lateAudio: number[];
  enqueue(...replies: string[]): void;
  setFaults(f: { dropAfterChunks?: number; malformedAt?: number; lateAudioAfterInterruption?: number }): void;
  dropAll(): void;
  /** Sends raw text on every open conversation (malformed or unexpected messages). */
  injectRaw(text: string): void;
  /** The agent asks the client to run a client tool (on every open conversation). */
  sendToolCall(toolName: string, parameters?: Record<string, unknown>): void;
  readonly timeline: Array<{ kind: 'first-audio' | 'interruption' | 'speech-stopped'; at: number; eventId: number }>;
  close(): Promise<void>;
}

export async function startElevenLabsConvaiFake(options: ElevenLabsConvaiFakeOptions = {}): Promise<ElevenLabsConvaiFake> {
  const cfg = { ...ELEVENLABS_CONVAI_FAKE_DEFAULTS, ...options };
  const agents = options.agents ?? ELEVENLABS_CONVAI_FAKE_DEFAULTS.agents;
  const replies = [...(options.replies ?? [])];
  const userTranscripts = [...(options.userTranscripts ?? [])];
  const connections: ConvaiConnectionRecord[] = [];
  const restRequests: ElevenLabsConvaiFake['restRequests'] = [];
  const lateAudio: number[] = [];
  const timeline: ElevenLabsConvaiFake['timeline'] = [];
  const signatures = new Map<string, string>();
  const live = new Set<WebSocket>();
  let toolSeq = 0;
  const sockets = new Set<Socket>();
  let faults = { lateAudioAfterInterruption: options.lateAudioAfterInterruption ?? 0, dropAfterChunks: options.dropAfterChunks, malformedAt: options.malformedAt };
  const wss = new WebSocketServer({ noServer: true });
  let port = 0;

  const detail = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://fake');
    const key = (req.headers['xi-api-key'] as string | undefined) ?? null;
    restRequests.push({ method: req.method ?? 'GET', path: url.pathname, key });
    if (key !== cfg.apiKey) return detail(res, 401, { detail: { status: 'invalid_api_key', message: 'Invalid API key' } });
    if (req.method === 'GET' && url.pathname === '/v1/convai/conversation/get-signed-url') {
      const agentId = url.searchParams.get('agent_id');
      if (!agentId) return detail(res, 422, { detail: [{ type: 'missing', loc: ['query', 'agent_id'], msg: 'Field required', input: null }] });
      if (!agents[agentId]) return detail(res, 404, { detail: { status: 'agent_not_found', message: `Agent ${agentId} not found` } });
      const signature = `seal_${randomUUID()}`;
      signatures.set(signature, agentId);
      return detail(res, 200, { signed_url: `ws://127.0.0.1:${port}/v1/convai/conversation?agent_id=${encodeURIComponent(agentId)}&conversation_signature=${signature}` });
    }
    const m = /^\/v1\/convai\/agents\/([^/]+)$/.exec(url.pathname);
    if (req.method === 'GET' && m) {
      const agentId = decodeURIComponent(m[1]!);
      const agent = agents[agentId];
      if (!agent) return detail(res, 404, { detail: { status: 'agent_not_found', message: `Agent ${agentId} not found` } });
      return detail(res, 200, { agent_id: agentId, name: agent.name, conversation_config: { agent: { first_message: agent.firstMessage ?? '', language: 'en' }, tts: { agent_output_audio_format: agent.outputFormat } }, metadata: { created_at_unix_secs: 1_730_000_000 }, tags: [] });
    }
    detail(res, 404, { detail: 'Not Found' });
  });
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.on('upgrade', (req, socket, head) => {
    const url = new URL(req.url ?? '/', 'http://fake');
    const agentId = url.searchParams.get('agent_id') ?? '';
    const signature = url.searchParams.get('conversation_signature') ?? '';
    if (url.pathname !== '/v1/convai/conversation' || signatures.get(signature) !== agentId) {
      socket.end('HTTP/1.1 403 Forbidden\r\ncontent-type: application/json\r\n\r\n{"detail":"Invalid conversation signature"}');
      return;
    }
    signatures.delete(signature);
    wss.handleUpgrade(req, socket, head, (ws) => serve(ws, agentId, agents[agentId]!));
  });

  function serve(ws: WebSocket, agentId: string, agent: FakeConvaiAgent): void {
    live.add(ws);
    const record: ConvaiConnectionRecord = { agentId, initiation: undefined, messages: [], audioMs: 0, pongs: [], sent: [], interruptions: [] };
    connections.push(record);
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
      live.delete(ws);
      for (const t of timers) clearTimeout(t);
      timers.clear();
    });
    const send = (msg: Record<string, any>) => {
      if (ws.readyState !== ws.OPEN) return;
      record.sent.push(msg.type === 'audio' ? `audio#${msg.audio_event.event_id}` : msg.type);
      ws.send(JSON.stringify(msg));
    };
    const outRate = Number(/^pcm_(\d+)$/.exec(agent.outputFormat)?.[1] ?? 16_000);
    const detector = new EnergyTurnDetector(16_000, { silenceMs: 500 });
    let eventId = 0;
    let started = false;
    let chunksSent = 0;
    let response: { eventId: number; startedAt: number; audioMs: number; interrupted: boolean } | undefined;
    let firstMessage = agent.firstMessage;

    const begin = () => {
      if (started) return;
      started = true;
      send({ type: 'conversation_initiation_metadata', conversation_initiation_metadata_event: { conversation_id: `conv_${randomUUID().replace(/-/g, '')}`, agent_output_audio_format: agent.outputFormat, user_input_audio_format: 'pcm_16000' } });
      if (cfg.pingIntervalMs > 0) {
        const ping = () => {
          send({ type: 'ping', ping_event: { event_id: ++eventId, ping_ms: 20 } });
          later(ping, cfg.pingIntervalMs);
        };
        later(ping, cfg.pingIntervalMs);
      }
      if (firstMessage) respond(firstMessage, 0);
    };

    function respond(text: string, delayMs: number): void {
      const id = ++eventId;
      const pcm = fakeBotVoice(text, outRate);
      const state = { eventId: id, startedAt: 0, audioMs: (pcm.length / outRate) * 1000, interrupted: false };
      response = state;
      const chunk = Math.round((cfg.audioChunkMs / 1000) * outRate);
      let offset = 0;
      let late = -1;
      // Chunks on a fixed timeline from the first (test/fakes/pacing.ts).
      const pacing = new Pacing(() => performance.now(), cfg.chunkIntervalMs);
      const step = () => {
        if (ws.readyState !== ws.OPEN || offset >= pcm.length) return;
        if (state.interrupted) {
          if (late < 0) late = faults.lateAudioAfterInterruption;
          if (late-- <= 0) return;
          lateAudio.push(id);
        }
        chunksSent++;
        if (faults.malformedAt !== undefined && chunksSent === faults.malformedAt) ws.send('{"type":"audio","audio_event":');
        if (faults.dropAfterChunks !== undefined && chunksSent > faults.dropAfterChunks) return void ws.terminate();
        if (offset === 0) {
          state.startedAt = performance.now();
          timeline.push({ kind: 'first-audio', at: state.startedAt, eventId: id });
          send({ type: 'agent_response', agent_response_event: { agent_response: text, event_id: id } });
        }
        const part = pcm.subarray(offset, offset + chunk);
        offset += part.length;
        send({ type: 'audio', audio_event: { audio_base_64: Buffer.from(part.buffer, part.byteOffset, part.byteLength).toString('base64'), event_id: id, alignment: null } });
        pacing.slot();
        later(step, pacing.untilNext());
      };
      later(step, delayMs);
    }

    /** The agent is talking by the server's account: its audio has not finished playing in real time. */
    const agentTalking = () => !!response && !response.interrupted && response.startedAt > 0 && performance.now() < response.startedAt + response.audioMs;

    ws.on('message', (data, isBinary) => {
      let msg: any;
      try {
        msg = JSON.parse(isBinary ? '' : data.toString());
      } catch {
        return;
      }
      if (typeof msg?.user_audio_chunk === 'string') {
        begin();
        const bytes = Buffer.from(msg.user_audio_chunk, 'base64');
        const pcm = new Int16Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + (bytes.byteLength & ~1)));
        record.audioMs += (pcm.length / 16_000) * 1000;
        const events = detector.push(pcm);
        send({ type: 'vad_score', vad_score_event: { vad_score: detector.inSpeech ? 0.97 : 0.02 } });
        for (const e of events) {
          if (e.type === 'start' && agentTalking()) {
            response!.interrupted = true;
            record.interruptions.push(response!.eventId);
            timeline.push({ kind: 'interruption', at: performance.now(), eventId: response!.eventId });
            send({ type: 'interruption', interruption_event: { event_id: response!.eventId } });
          } else if (e.type === 'stop') {
            timeline.push({ kind: 'speech-stopped', at: performance.now(), eventId });
            send({ type: 'user_transcript', user_transcription_event: { user_transcript: userTranscripts.shift() ?? 'hello', event_id: ++eventId } });
            respond(replies.shift() ?? 'You said something.', cfg.responseDelayMs);
          }
        }
        return;
      }
      record.messages.push(msg);
      switch (msg?.type) {
        case 'conversation_initiation_client_data': {
          record.initiation = msg;
          const o = msg.conversation_config_override;
          if (o && !agent.allowOverrides) {
            const field = o.agent?.prompt ? 'prompt' : o.agent?.first_message !== undefined ? 'first_message' : o.agent?.language ? 'language' : o.tts?.voice_id ? 'voice_id' : undefined;
            if (field) return ws.close(1008, `Override for field '${field}' is not allowed by config.`);
          }
          if (o?.agent?.first_message !== undefined) firstMessage = o.agent.first_message || null;
          return begin();
        }
        case 'pong':
          record.pongs.push(msg.event_id);
          return;
        default:
          return;
      }
    });
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    apiKey: cfg.apiKey,
    connections,
    restRequests,
    lateAudio,
    timeline,
    enqueue: (...r) => void replies.push(...r),
    setFaults: (f) => void (faults = { ...faults, ...f }),
    dropAll: () => {
      for (const ws of live) ws.terminate();
    },
    injectRaw: (text) => {
      for (const ws of live) ws.send(text);
    },
    sendToolCall: (toolName, parameters = {}) => {
      for (const ws of live) ws.send(JSON.stringify({ type: 'client_tool_call', client_tool_call: { tool_name: toolName, tool_call_id: `call_${++toolSeq}`, parameters, event_id: 1000 + toolSeq } }));
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const ws of live) ws.terminate();
        wss.close();
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
