/**
 * Local stand-in for OpenAI's audio endpoints, as an OpenAI-compatible speech server speaks them:
 *
 * - `POST /v1/audio/transcriptions`: multipart form (`file` a WAV, `model`, `language`,
 *   `response_format` json | text | verbose_json), answered `{"text": ...}`;
 * - `POST /v1/audio/speech`: JSON `{model, input, voice, response_format, speed?, instructions?}`,
 *   answered with the audio as a chunked body; only `pcm` (raw 24 kHz int16 LE, `sampleRate`) and
 *   `wav` are produced (others get a 400 that says so);
 * - `GET /v1/models`: the model list (the batch STT's key check);
 * - `GET /v1/realtime?intent=transcription` upgraded to a WebSocket: a Realtime transcription
 *   session (openai-transcription-ws.ts).
 *
 * Auth `Authorization: Bearer <key>`, with OpenAI's 401 body. `failNext(count, status)` answers
 * the next requests 429 (`rate_limit_exceeded`) or 5xx with `retry-after-ms`, which the SDK
 * honours; `refuseNextSockets` refuses WebSocket handshakes the same way. Latencies run on a `Clock`.
 *
 * Honest limits: there is no recogniser. An utterance with speech in it (a 10 ms window above
 * `speechThresholdDb`) is the next entry of `script` (counted across every request and socket,
 * consumed when its transcript is delivered, so a retried utterance gets the same text); silence
 * is transcribed as ''. The voice is the fake voice (fake-voice.ts). No text normalisation.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import { concat, encodeWav } from '../../core/audio.ts';
import { RealClock, type Clock } from '../../core/clock.ts';
import type { OptionsFor } from '../../core/options.ts';
import { fakeSpeech, type FakeVoiceName } from './fake-voice.ts';
import { serveTranscriptionSocket, type TranscriptionSocketRecord } from './openai-transcription-ws.ts';
import { Pacing } from './pacing.ts';

export const OPENAI_AUDIO_FAKE_DEFAULTS = {
  apiKey: 'sk-fake-openai-audio-key',
  transcriptionModels: ['gpt-4o-mini-transcribe', 'gpt-4o-transcribe', 'whisper-1'] as readonly string[],
  speechModels: ['gpt-4o-mini-tts', 'tts-1', 'tts-1-hd'] as readonly string[],
  /** Voices `/v1/audio/speech` accepts; `null`: any (a self-hosted server with its own names). */
  voices: ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'nova', 'onyx', 'sage', 'shimmer', 'verse', 'marin', 'cedar'] as readonly string[] | null,
  /** Rate of the `pcm` the speech endpoint sends (OpenAI: 24 kHz). */
  sampleRate: 24_000,
  voice: 'tones' as FakeVoiceName,
  speechThresholdDb: -40,
  /** Latency of a transcription (request or commit -> text). */
  transcriptionDelayMs: 0,
  /** Realtime: wait between transcript deltas (ms). */
  deltaIntervalMs: 0,
  /** Speech: request -> first audio. */
  firstAudioDelayMs: 0,
  /** Speech: audio per body chunk. */
  chunkMs: 100,
  /** Speech: wait between chunks (0 = faster than real time, as the service). */
  chunkIntervalMs: 0,
} as const;

export interface OpenAIAudioFakeOptions extends OptionsFor<Omit<typeof OPENAI_AUDIO_FAKE_DEFAULTS, 'voice'>> {
  readonly voice?: FakeVoiceName;
  readonly script?: readonly string[];
  readonly clock?: Clock;
}

export interface TranscriptionRequestRecord {
  readonly model: string;
  readonly language?: string;
  readonly responseFormat?: string;
  readonly audioMs: number;
  readonly sampleRate: number;
  readonly status: number;
}

export interface SpeechRequestRecord {
  readonly body: Record<string, any>;
  readonly receivedAtMs: number;
  firstAudioAtMs?: number;
  /** Bytes of audio written before the client went away or the body ended. */
  bytesSent: number;
  clientAborted: boolean;
}

export interface AudioFaults {
  /** Speech: destroy the connection after this many chunks. */
  dropSpeechAfterChunks?: number | undefined;
  /** Speech: answer 200 with a JSON body instead of audio. */
  malformedSpeech?: boolean | undefined;
  /** Transcriptions: destroy the connection of the next n requests before answering. */
  dropTranscriptions?: number | undefined;
  /** Transcriptions: answer the next n requests 200 with a body that is not JSON. */
  malformedTranscriptions?: number | undefined;
  /** Realtime: send a non-JSON message in place of the next transcript delta. */
  malformedRealtime?: boolean | undefined;
}

export interface OpenAIAudioFake {
  /** `http://127.0.0.1:<port>/v1`: the SDK's `baseURL`, and the realtime socket's (ws://). */
  readonly baseURL: string;
  readonly apiKey: string;
  readonly transcriptions: TranscriptionRequestRecord[];
  readonly speech: SpeechRequestRecord[];
  readonly sockets: TranscriptionSocketRecord[];
  /** Transcripts delivered, in order (both endpoints). */
  readonly finals: string[];
  /** Requests answered with `failNext`'s status. */
  readonly failed: number;
  failNext(count: number, status: number): void;
  refuseNextSockets(count: number, status: number): void;
  setFaults(faults: AudioFaults): void;
  /** Destroys every open realtime socket (a network drop). */
  dropSockets(): void;
  close(): Promise<void>;
}

/** Shared state of one fake: the script and the faults, read by both endpoints. */
export interface AudioFakeState {
  readonly cfg: typeof OPENAI_AUDIO_FAKE_DEFAULTS & { apiKey: string };
  readonly clock: Clock;
  faults: AudioFaults;
  /** The transcript of the next utterance with speech in it ('' for silence); `consume` it once delivered. */
  transcriptFor(pcm: Int16Array, sampleRate: number): { text: string; consume(): void };
}

export function openAIError(res: ServerResponse, status: number, message: string, type: string, code: string | null, param: string | null = null): void {
  res.writeHead(status, { 'content-type': 'application/json', 'x-request-id': `req_${Date.now().toString(36)}` });
  res.end(JSON.stringify({ error: { message, type, param, code } }));
}

export const bearer = (req: IncomingMessage): string | null => /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? null;
export const masked = (key: string): string => `${key.slice(0, 3)}*****${key.slice(-4)}`;
export const INVALID_KEY = (token: string | null) => `Incorrect API key provided: ${masked(token ?? '')}. You can find your API key at https://platform.openai.com/account/api-keys.`;

/** Whether any 10 ms window is louder than `thresholdDb` dBFS. */
export function hasSpeech(pcm: Int16Array, sampleRate: number, thresholdDb: number): boolean {
  const win = Math.max(1, Math.round(sampleRate / 100));
  const floor = 32768 * 10 ** (thresholdDb / 20);
  for (let at = 0; at + win <= pcm.length; at += win) {
    let sum = 0;
    for (let i = at; i < at + win; i++) sum += pcm[i]! * pcm[i]!;
    if (Math.sqrt(sum / win) > floor) return true;
  }
  return false;
}

export async function startOpenAIAudioFake(options: OpenAIAudioFakeOptions = {}): Promise<OpenAIAudioFake> {
  const cfg = { ...OPENAI_AUDIO_FAKE_DEFAULTS, ...options } as AudioFakeState['cfg'];
  const clock = options.clock ?? new RealClock();
  const script = [...(options.script ?? [])];
  let scriptAt = 0;
  const transcriptions: TranscriptionRequestRecord[] = [];
  const speech: SpeechRequestRecord[] = [];
  const socketRecords: TranscriptionSocketRecord[] = [];
  const finals: string[] = [];
  const sockets = new Set<Socket>();
  const live = new Set<WebSocket>();
  let failures = { count: 0, status: 500 };
  let refusals = { count: 0, status: 429 };
  const state: AudioFakeState = {
    cfg,
    clock,
    faults: {},
    transcriptFor(pcm, sampleRate) {
      if (!hasSpeech(pcm, sampleRate, cfg.speechThresholdDb)) return { text: '', consume: () => finals.push('') };
      const text = script[scriptAt] ?? 'I did not script this.';
      return { text, consume: () => (scriptAt++, finals.push(text)) };
    },
  };

  let failed = 0;
  function failIfAsked(res: ServerResponse): boolean {
    if (failures.count <= 0) return false;
    failures.count--;
    failed++;
    res.setHeader('retry-after-ms', '5');
    if (failures.status === 429) openAIError(res, 429, 'Rate limit reached for requests', 'requests', 'rate_limit_exceeded');
    else openAIError(res, failures.status, 'The server had an error while processing your request. Sorry about that!', 'server_error', null);
    return true;
  }

  async function handleTranscription(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const raw = await readBody(req);
    let form: FormData;
    try {
      form = await new Response(new Uint8Array(raw), { headers: { 'content-type': req.headers['content-type'] ?? '' } }).formData();
    } catch {
      return openAIError(res, 400, 'Could not parse multipart form', 'invalid_request_error', null);
    }
    const model = String(form.get('model') ?? '');
    const file = form.get('file');
    if (!model) return openAIError(res, 400, "you must provide a model parameter", 'invalid_request_error', null, 'model');
    if (!cfg.transcriptionModels.includes(model)) return openAIError(res, 400, `The model '${model}' does not exist or you do not have access to it.`, 'invalid_request_error', 'model_not_found', 'model');
    if (!(file instanceof Blob)) return openAIError(res, 400, "you must provide a file parameter", 'invalid_request_error', null, 'file');
    const wav = parseWav(new Uint8Array(await file.arrayBuffer()));
    if (!wav) return openAIError(res, 400, 'Invalid file format. Supported formats: flac, m4a, mp3, mp4, mpeg, mpga, oga, ogg, wav, webm (the fake decodes 16-bit PCM WAV only)', 'invalid_request_error', null, 'file');
    const audioMs = (wav.pcm.length / wav.sampleRate) * 1000;
    const language = form.get('language') ? String(form.get('language')) : undefined;
    const responseFormat = form.get('response_format') ? String(form.get('response_format')) : 'json';
    const record = { model, ...(language ? { language } : {}), responseFormat, audioMs, sampleRate: wav.sampleRate, status: 200 };
    if (audioMs < 100) {
      transcriptions.push({ ...record, status: 400 });
      return openAIError(res, 400, 'Audio file is too short. Minimum audio length is 0.1 seconds.', 'invalid_request_error', 'audio_too_short', 'file');
    }
    if (state.faults.dropTranscriptions) {
      state.faults.dropTranscriptions--;
      transcriptions.push({ ...record, status: 0 });
      return void req.socket.destroy();
    }
    transcriptions.push(record);
    if (cfg.transcriptionDelayMs > 0) await clock.sleep(cfg.transcriptionDelayMs);
    if (state.faults.malformedTranscriptions) {
      state.faults.malformedTranscriptions--;
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end('{"text": "cut sho');
    }
    const { text, consume } = state.transcriptFor(wav.pcm, wav.sampleRate);
    consume();
    if (responseFormat === 'text') {
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
      return void res.end(text);
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    const usage = { type: 'duration', seconds: Math.ceil(audioMs / 1000) };
    res.end(JSON.stringify(responseFormat === 'verbose_json' ? { task: 'transcribe', language: language ?? 'english', duration: audioMs / 1000, text, segments: [], usage } : { text, usage }));
  }

  async function handleSpeech(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body: Record<string, any>;
    try {
      body = JSON.parse(await readBody(req).then((b) => b.toString('utf8')));
    } catch {
      return openAIError(res, 400, 'We could not parse the JSON body of your request.', 'invalid_request_error', null);
    }
    if (typeof body.input !== 'string' || !body.input) return openAIError(res, 400, "Missing required parameter: 'input'.", 'invalid_request_error', 'missing_required_parameter', 'input');
    if (!cfg.speechModels.includes(body.model)) return openAIError(res, 400, `The model '${body.model}' does not exist or you do not have access to it.`, 'invalid_request_error', 'model_not_found', 'model');
    if (cfg.voices && !cfg.voices.includes(body.voice)) {
      return openAIError(res, 400, `Invalid value: '${body.voice}'. Supported values are: ${cfg.voices.map((v) => `'${v}'`).join(', ')}.`, 'invalid_request_error', 'invalid_value', 'voice');
    }
    const format = body.response_format ?? 'mp3';
    if (format !== 'pcm' && format !== 'wav') return openAIError(res, 400, `The fake only produces pcm and wav, got '${format}'.`, 'invalid_request_error', 'invalid_value', 'response_format');
    const record: SpeechRequestRecord = { body, receivedAtMs: clock.now(), bytesSent: 0, clientAborted: false };
    speech.push(record);
    const rendered = await fakeSpeech(body.input, cfg.sampleRate, cfg.voice);
    if (state.faults.malformedSpeech) {
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end(JSON.stringify({ error: { message: 'upstream model crashed', type: 'server_error' } }));
    }
    let finished = false;
    const abort = new AbortController();
    res.on('close', () => {
      if (!finished) record.clientAborted = true;
      abort.abort();
    });
    res.writeHead(200, { 'content-type': format === 'pcm' ? 'audio/pcm' : 'audio/wav', 'transfer-encoding': 'chunked' });
    const bytes = format === 'pcm' ? Buffer.from(rendered.pcm.buffer, rendered.pcm.byteOffset, rendered.pcm.byteLength) : Buffer.from(encodeWav(rendered.pcm, cfg.sampleRate));
    const step = Math.max(2, Math.round((cfg.chunkMs * cfg.sampleRate) / 1000) * 2);
    try {
      if (cfg.firstAudioDelayMs > 0) await clock.sleep(cfg.firstAudioDelayMs, abort.signal);
      // Chunks on a fixed timeline from the first (test/fakes/pacing.ts).
      const pacing = new Pacing(() => clock.now(), cfg.chunkIntervalMs);
      for (let at = 0, index = 0; at < bytes.length; at += step, index++) {
        const wait = pacing.slot();
        if (index > 0 && cfg.chunkIntervalMs > 0) await clock.sleep(wait, abort.signal);
        if (state.faults.dropSpeechAfterChunks !== undefined && index >= state.faults.dropSpeechAfterChunks) {
          finished = true;
          return void req.socket.destroy();
        }
        if (index === 0) record.firstAudioAtMs = clock.now();
        // Chunks of odd length: a sample split across two chunks must be put back together.
        const end = Math.min(bytes.length, at + step + (index % 2 ? 1 : -1));
        const piece = bytes.subarray(at, end);
        at = end - step;
        record.bytesSent += piece.length;
        await new Promise<void>((resolve) => res.write(piece, () => resolve()));
      }
      finished = true;
      res.end();
    } catch {
      // the client went away during a delay
    }
  }

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake');
    const token = bearer(req);
    if (token !== cfg.apiKey) return openAIError(res, 401, INVALID_KEY(token), 'invalid_request_error', 'invalid_api_key');
    if (req.method === 'GET' && url.pathname === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      const models = [...cfg.transcriptionModels, ...cfg.speechModels];
      return void res.end(JSON.stringify({ object: 'list', data: models.map((id) => ({ id, object: 'model', created: 1_700_000_000, owned_by: 'system' })) }));
    }
    if (req.method === 'POST' && (url.pathname === '/v1/audio/transcriptions' || url.pathname === '/v1/audio/speech')) {
      if (failIfAsked(res)) return;
      const handle = url.pathname.endsWith('speech') ? handleSpeech : handleTranscription;
      handle(req, res).catch(() => res.destroy());
      return;
    }
    openAIError(res, 404, `Invalid URL (${req.method} ${url.pathname})`, 'invalid_request_error', null);
  });
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => {
    const url = new URL(req.url ?? '/', 'http://fake');
    if (url.pathname !== '/v1/realtime') return void socket.end('HTTP/1.1 404 Not Found\r\n\r\n');
    if (refusals.count > 0) {
      refusals.count--;
      const body = JSON.stringify({ error: { message: 'Rate limit reached', type: 'requests', code: 'rate_limit_exceeded', param: null } });
      return void socket.end(`HTTP/1.1 ${refusals.status} Too Many Requests\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`);
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      live.add(ws);
      ws.on('close', () => live.delete(ws));
      socketRecords.push(serveTranscriptionSocket(ws, { intent: url.searchParams.get('intent'), model: url.searchParams.get('model'), token: bearer(req) }, state));
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    baseURL: `http://127.0.0.1:${port}/v1`,
    apiKey: cfg.apiKey,
    transcriptions,
    speech,
    sockets: socketRecords,
    finals,
    get failed() {
      return failed;
    },
    failNext: (count, status) => void (failures = { count, status }),
    refuseNextSockets: (count, status) => void (refusals = { count, status }),
    setFaults: (f) => void (state.faults = { ...state.faults, ...f }),
    dropSockets: () => {
      for (const ws of live) ws.terminate();
    },
    close: () => new Promise<void>((resolve) => {
      for (const ws of live) ws.terminate();
      for (const s of sockets) s.destroy();
      wss.close();
      server.close(() => resolve());
    }),
  };
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => resolve(Buffer.concat(parts)));
    req.on('error', reject);
  });
}

/** 16-bit PCM mono WAV -> samples, or undefined for anything else. */
function parseWav(bytes: Uint8Array): { pcm: Int16Array; sampleRate: number } | undefined {
  const text = (at: number, n: number) => String.fromCharCode(...bytes.subarray(at, at + n));
  if (bytes.length < 44 || text(0, 4) !== 'RIFF' || text(8, 4) !== 'WAVE') return undefined;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 12;
  let sampleRate = 0;
  let bits = 0;
  while (at + 8 <= bytes.length) {
    const id = text(at, 4);
    const size = view.getUint32(at + 4, true);
    if (id === 'fmt ') {
      sampleRate = view.getUint32(at + 12, true);
      bits = view.getUint16(at + 22, true);
    } else if (id === 'data') {
      if (bits !== 16 || !sampleRate) return undefined;
      const data = bytes.slice(at + 8, at + 8 + size);
      return { pcm: concat([new Int16Array(data.buffer, 0, data.byteLength >> 1)]), sampleRate };
    }
    at += 8 + size;
  }
  return undefined;
}
