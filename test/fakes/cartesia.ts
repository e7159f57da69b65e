/**
 * Local stand-in for Cartesia's TTS WebSocket (`wss://…/tts/websocket`), speaking its protocol as
 * `@cartesia/cartesia-js` sends it. The SDK forces `wss://`, so the fake serves TLS (a self-signed
 * certificate: tests pass its `ca`) and plain HTTP on one port.
 *
 * - handshake: `Authorization: Bearer <key>` (or `api_key` in the query) and a `Cartesia-Version`
 *   header (or `cartesia_version` query); a wrong key is a 401 with a JSON body, a missing version
 *   a 400; `refuseNext(count, 429)` for rate limiting;
 * - a generation request `{context_id, model_id, transcript, voice: {mode: "id", id},
 *   output_format: {container: "raw", encoding: "pcm_s16le", sample_rate}, language?, continue,
 *   add_timestamps?, add_phoneme_timestamps?}` answered per chunk by `{type: "chunk", data
 *   (base64), done: false, status_code: 206, step_time, context_id}`, each followed (as the
 *   service sends them, after the audio) by `{type: "timestamps", word_timestamps: {words, start,
 *   end}}` and `{type: "phoneme_timestamps", phoneme_timestamps: {phonemes, start, end}}` for what
 *   starts in that chunk (seconds from the context's start), then `{type: "done", done: true,
 *   status_code: 206}`;
 * - `{context_id, cancel: true}` stops that context's generation;
 * - a refused request: `{type: "error", context_id, status_code, title, message, error_code, done: true}`.
 *
 * Faults: `dropAfterChunks`, `malformedAt` (a non-JSON frame instead of the n-th chunk). Limits:
 * the voice is the fake voice (fake-voice.ts); one generation at a time per socket; `continue`
 * (transcript streaming into one context) is not modelled: each request is a whole utterance.
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { RealClock, type Clock } from '../../core/clock.ts';
import { fakeSpeech, type FakeVoiceName } from './fake-voice.ts';
import { listenPolyglot, selfSignedCertificate } from './s2s-turns.ts';
import { Pacing } from './pacing.ts';

export const CARTESIA_FAKE_DEFAULTS = {
  apiKey: 'sk_car_fake_key',
  models: ['sonic-3', 'sonic-2', 'sonic-turbo'] as readonly string[],
  voice: 'tones' as FakeVoiceName,
  firstAudioDelayMs: 0,
  chunkMs: 100,
  chunkIntervalMs: 0,
} as const;

export const CARTESIA_FAKE_RATES = [8000, 16000, 22050, 24000, 44100, 48000] as const;

export interface CartesiaFakeOptions {
  readonly apiKey?: string;
  readonly models?: readonly string[];
  readonly voice?: FakeVoiceName;
  readonly firstAudioDelayMs?: number;
  readonly chunkMs?: number;
  readonly chunkIntervalMs?: number;
  readonly clock?: Clock;
}

export interface CartesiaConnectionRecord {
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly requests: Array<Record<string, any>>;
  readonly cancels: string[];
  /** Server message types in order (`chunk`, `timestamps`, `phoneme_timestamps`, `done`, `error`, `malformed`). */
  readonly sent: string[];
  /** Per context: `clock.now()` at the request and at its first chunk; chunks sent after its cancel. */
  readonly timing: Map<string, { receivedAtMs: number; firstAudioAtMs?: number; chunksAfterCancel: number }>;
  closeCode?: number;
}

export interface CartesiaFake {
  /** `https://127.0.0.1:<port>`: the SDK's `baseURL` (the socket is wss:// on the same port). */
  readonly baseUrl: string;
  readonly ca: string;
  readonly apiKey: string;
  readonly connections: CartesiaConnectionRecord[];
  refuseNext(count: number, status: number): void;
  /** `lateErrorAfterCancel`: a cancelled context's error arrives later, as the next request comes in. */
  setFaults(faults: { dropAfterChunks?: number | undefined; malformedAt?: number | undefined; lateErrorAfterCancel?: boolean | undefined }): void;
  drop(): void;
  close(): Promise<void>;
}

export async function startCartesiaFake(options: CartesiaFakeOptions = {}): Promise<CartesiaFake> {
  const cfg = { ...CARTESIA_FAKE_DEFAULTS, ...options };
  const clock = options.clock ?? new RealClock();
  const connections: CartesiaConnectionRecord[] = [];
  const live = new Set<WebSocket>();
  let refusals = { count: 0, status: 429 };
  let faults: { dropAfterChunks?: number | undefined; malformedAt?: number | undefined; lateErrorAfterCancel?: boolean | undefined } = {};
  const wss = new WebSocketServer({ noServer: true });

  const refuse = (socket: Duplex, status: number, reason: string, body: Record<string, unknown>) => {
    const text = JSON.stringify(body);
    socket.end(`HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`);
  };

  function onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const url = new URL(req.url ?? '/', 'http://fake');
    if (url.pathname !== '/tts/websocket') return refuse(socket, 404, 'Not Found', { error: 'not found' });
    const key = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? url.searchParams.get('api_key');
    if (key !== cfg.apiKey) return refuse(socket, 401, 'Unauthorized', { error: 'Invalid API key', status_code: 401 });
    if (!req.headers['cartesia-version'] && !url.searchParams.get('cartesia_version')) return refuse(socket, 400, 'Bad Request', { error: 'Cartesia-Version header is required', status_code: 400 });
    if (refusals.count > 0) {
      refusals.count--;
      return refuse(socket, refusals.status, refusals.status === 429 ? 'Too Many Requests' : 'Service Unavailable', { error: 'Concurrency limit exceeded', status_code: refusals.status });
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      const record: CartesiaConnectionRecord = { headers: req.headers, requests: [], cancels: [], sent: [], timing: new Map() };
      connections.push(record);
      live.add(ws);
      ws.on('close', (code) => {
        record.closeCode = code;
        live.delete(ws);
      });
      serve(ws, record);
    });
  }

  function serve(ws: WebSocket, record: CartesiaConnectionRecord): void {
    const cancelled = new Set<string>();
    let chunks = 0;
    let work = Promise.resolve();
    const abort = new AbortController();
    ws.on('close', () => abort.abort());
    const send = (m: Record<string, unknown>) => {
      if (ws.readyState !== ws.OPEN) return;
      record.sent.push(String(m.type));
      ws.send(JSON.stringify(m));
    };
    const refuseRequest = (contextId: unknown, status: number, title: string, message: string, errorCode: string) =>
      send({ type: 'error', context_id: contextId, status_code: status, title, message, error_code: errorCode, done: true, request_id: `req_${Date.now().toString(36)}` });

    async function generate(r: Record<string, any>): Promise<void> {
      const id = String(r.context_id);
      const rate = r.output_format.sample_rate as number;
      const timing = { receivedAtMs: clock.now(), chunksAfterCancel: 0 } as { receivedAtMs: number; firstAudioAtMs?: number; chunksAfterCancel: number };
      record.timing.set(id, timing);
      const speech = await fakeSpeech(r.transcript, rate, cfg.voice);
      const step = Math.max(1, Math.round((cfg.chunkMs * rate) / 1000));
      if (cfg.firstAudioDelayMs > 0) await clock.sleep(cfg.firstAudioDelayMs, abort.signal);
      // Chunks on a fixed timeline from the first (test/fakes/pacing.ts).
      const pacing = new Pacing(() => clock.now(), cfg.chunkIntervalMs);
      for (let at = 0; at < speech.pcm.length; at += step) {
        if (cancelled.has(id) || ws.readyState !== ws.OPEN) return;
        const wait = pacing.slot();
        // Between chunks the fake always yields (a sleep of 0 when overdue), so a cancel is read between them.
        if (at > 0 && cfg.chunkIntervalMs > 0) await clock.sleep(wait, abort.signal);
        if (cancelled.has(id)) return;
        if (faults.dropAfterChunks !== undefined && chunks >= faults.dropAfterChunks) return void ws.terminate();
        chunks++;
        if (faults.malformedAt !== undefined && chunks === faults.malformedAt) {
          record.sent.push('malformed');
          ws.send('{"type":"chunk","data":"AAAA');
          continue;
        }
        const piece = speech.pcm.subarray(at, at + step);
        timing.firstAudioAtMs ??= clock.now();
        send({ type: 'chunk', data: Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength).toString('base64'), done: false, status_code: 206, step_time: 12.5, context_id: id });
        const [fromMs, toMs] = [(at / rate) * 1000, ((at + piece.length) / rate) * 1000];
        const last = at + step >= speech.pcm.length;
        const inChunk = <T extends { startMs: number }>(list: readonly T[]) => list.filter((x) => x.startMs >= fromMs && (last || x.startMs < toMs));
        const words = inChunk(speech.words);
        if (r.add_timestamps && words.length) {
          send({ type: 'timestamps', done: false, status_code: 206, context_id: id, word_timestamps: { words: words.map((w) => w.word), start: words.map((w) => w.startMs / 1000), end: words.map((w) => w.endMs / 1000) } });
        }
        const phonemes = inChunk(speech.phonemes);
        if (r.add_phoneme_timestamps && phonemes.length) {
          send({ type: 'phoneme_timestamps', done: false, status_code: 206, context_id: id, phoneme_timestamps: { phonemes: phonemes.map((p) => p.phoneme), start: phonemes.map((p) => p.startMs / 1000), end: phonemes.map((p) => p.endMs / 1000) } });
        }
      }
      if (!cancelled.has(id)) send({ type: 'done', done: true, status_code: 206, context_id: id });
    }

    ws.on('message', (data, binary) => {
      let r: any;
      try {
        r = binary ? undefined : JSON.parse(data.toString());
      } catch {
        r = undefined;
      }
      if (!r || typeof r !== 'object') return refuseRequest(null, 400, 'Invalid request', 'The message is not valid JSON.', 'invalid_json');
      if (r.cancel === true) {
        record.cancels.push(String(r.context_id));
        cancelled.add(String(r.context_id));
        return;
      }
      record.requests.push(r);
      if (faults.lateErrorAfterCancel) {
        for (const id of record.cancels) refuseRequest(id, 500, 'Generation failed', 'The context was cancelled.', 'generation_failed');
      }
      if (!cfg.models.includes(r.model_id)) return refuseRequest(r.context_id, 400, 'Invalid model', 'The model is not valid, make sure it is a valid model ID.', 'model_not_found');
      if (r.voice?.mode !== 'id' || typeof r.voice?.id !== 'string') return refuseRequest(r.context_id, 400, 'Invalid voice', 'voice must be {mode: "id", id}.', 'invalid_voice');
      const f = r.output_format ?? {};
      if (f.container !== 'raw' || f.encoding !== 'pcm_s16le' || !(CARTESIA_FAKE_RATES as readonly number[]).includes(f.sample_rate)) {
        return refuseRequest(r.context_id, 400, 'Invalid output format', 'The fake produces raw pcm_s16le at 8000, 16000, 22050, 24000, 44100 or 48000 Hz.', 'invalid_output_format');
      }
      if (typeof r.transcript !== 'string' || typeof r.context_id !== 'string') return refuseRequest(r.context_id, 400, 'Invalid request', 'transcript and context_id are required.', 'invalid_request');
      work = work.then(() => generate(r)).catch(() => undefined);
    });
  }

  const listener = await listenPolyglot((_req, res) => res.writeHead(404).end(), onUpgrade);
  return {
    baseUrl: `https://127.0.0.1:${listener.port}`,
    ca: selfSignedCertificate().cert,
    apiKey: cfg.apiKey,
    connections,
    refuseNext: (count, status) => void (refusals = { count, status }),
    setFaults: (f) => void (faults = { ...faults, ...f }),
    drop: () => {
      for (const ws of live) ws.terminate();
    },
    close: async () => {
      for (const ws of live) ws.terminate();
      wss.close();
      await listener.close();
    },
  };
}
