/**
 * Local stand-in for Deepgram's streaming text-to-speech WebSocket (`/v1/speak`, Aura), speaking
 * its wire protocol as `@deepgram/sdk`'s `speak.v1` socket sends it:
 *
 * - handshake: `Authorization: Token <key>` (or the `token, <key>` subprotocol), the real 401
 *   body and `dg-error` header; query `model` (an `aura-` voice), `encoding` (linear16 only here),
 *   `sample_rate` (8000, 16000, 24000, 32000, 48000);
 * - `Metadata {request_id, model_name, model_version, model_uuid}` when the socket opens;
 * - client JSON: `Speak {text}` buffers text; `Flush` synthesises what is buffered, sends it as
 *   binary linear16 frames, then `Flushed {sequence_id}`; `Clear` drops buffered text and any audio
 *   not yet sent, then `Cleared {sequence_id}`; `Close` sends what is pending and closes 1000;
 * - more than `flushLimit` Flushes a minute: a `Warning` and the Flush is not processed.
 *
 * Faults: `dropAfterChunks` (the socket is destroyed mid-audio), `malformedAt` (a non-JSON text
 * frame instead of the n-th audio frame), `lateChunksAfterClear` (audio frames already on the
 * wire when Clear arrived, still delivered before Cleared), `refuseNext` (handshake refusals, 429
 * for rate limiting). Limits: the voice is the fake voice (fake-voice.ts), no text normalisation.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import { RealClock, type Clock } from '../../core/clock.ts';
import { authorized, rejectUpgrade } from './deepgram.ts';
import { fakeSpeech, type FakeVoiceName } from './fake-voice.ts';
import { Pacing } from './pacing.ts';

export const DEEPGRAM_SPEAK_FAKE_DEFAULTS = {
  apiKey: 'dg-fake-speak-key',
  voice: 'tones' as FakeVoiceName,
  /** Flush -> first audio frame. */
  firstAudioDelayMs: 0,
  /** Audio per binary frame. */
  chunkMs: 100,
  /** Wait between frames (0 = faster than real time, as the service). */
  chunkIntervalMs: 0,
  flushLimit: 20,
} as const;

export const DEEPGRAM_SPEAK_RATES = [8000, 16000, 24000, 32000, 48000] as const;

export interface DeepgramSpeakFakeOptions {
  readonly apiKey?: string;
  readonly voice?: FakeVoiceName;
  readonly firstAudioDelayMs?: number;
  readonly chunkMs?: number;
  readonly chunkIntervalMs?: number;
  readonly flushLimit?: number;
  readonly clock?: Clock;
}

export interface SpeakFaults {
  dropAfterChunks?: number | undefined;
  malformedAt?: number | undefined;
  lateChunksAfterClear?: number | undefined;
  /** Clear is taken but never confirmed (no Cleared): a provider slow or failing to answer. */
  withholdCleared?: boolean | undefined;
}

export interface SpeakConnectionRecord {
  readonly query: Readonly<Record<string, string>>;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /** Client messages in order: `Speak:<text>`, `Flush`, `Clear`, `Close`. */
  readonly received: string[];
  /** Server messages in order: JSON types, and `audio` for each binary frame. */
  readonly sent: string[];
  /** `clock.now()` of each Flush received, and of the first audio frame that answered it. */
  readonly flushes: Array<{ atMs: number; firstAudioAtMs?: number }>;
  closeCode?: number;
}

export interface DeepgramSpeakFake {
  /** `ws://127.0.0.1:<port>`: the SDK's `baseUrl`. */
  readonly url: string;
  readonly apiKey: string;
  readonly connections: SpeakConnectionRecord[];
  refuseNext(count: number, status: number): void;
  setFaults(faults: SpeakFaults): void;
  /** Destroys every open socket (a network drop). */
  drop(): void;
  close(): Promise<void>;
}

export async function startDeepgramSpeakFake(options: DeepgramSpeakFakeOptions = {}): Promise<DeepgramSpeakFake> {
  const cfg = { ...DEEPGRAM_SPEAK_FAKE_DEFAULTS, ...options };
  const clock = options.clock ?? new RealClock();
  const connections: SpeakConnectionRecord[] = [];
  const sockets = new Set<Socket>();
  const live = new Set<WebSocket>();
  let refusals = { count: 0, status: 429 };
  let faults: SpeakFaults = {};
  const wss = new WebSocketServer({ noServer: true });
  const server: Server = createServer((_req, res) => res.writeHead(404).end());

  server.on('upgrade', (req, socket: Socket, head) => {
    const url = new URL(req.url ?? '/', 'http://fake');
    if (url.pathname !== '/v1/speak') return rejectUpgrade(socket, 404, 'Not Found', 'NOT_FOUND', 'Not found.');
    if (!authorized(req, cfg.apiKey)) return rejectUpgrade(socket, 401, 'Unauthorized', 'INVALID_AUTH', 'Invalid credentials.');
    if (refusals.count > 0) {
      refusals.count--;
      const [reason, code] = refusals.status === 429 ? ['Too Many Requests', 'TOO_MANY_REQUESTS'] : ['Service Unavailable', 'SERVICE_UNAVAILABLE'];
      return rejectUpgrade(socket, refusals.status, reason, code, 'The fake was told to refuse this connection.');
    }
    const query = Object.fromEntries(url.searchParams);
    const rate = Number(query.sample_rate ?? 24_000);
    if ((query.encoding ?? 'linear16') !== 'linear16') return rejectUpgrade(socket, 400, 'Bad Request', 'UNSUPPORTED_ENCODING', `The fake only produces linear16 (got ${query.encoding}).`);
    if (!(DEEPGRAM_SPEAK_RATES as readonly number[]).includes(rate)) return rejectUpgrade(socket, 400, 'Bad Request', 'UNSUPPORTED_SAMPLE_RATE', `sample_rate ${query.sample_rate} is not supported for linear16.`);
    if (!/^aura-/.test(query.model ?? 'aura-asteria-en')) return rejectUpgrade(socket, 400, 'Bad Request', 'INVALID_MODEL', `No such model: ${query.model}.`);
    wss.handleUpgrade(req, socket, head, (ws) => {
      const record: SpeakConnectionRecord = { query, headers: req.headers, received: [], sent: [], flushes: [] };
      connections.push(record);
      live.add(ws);
      ws.on('close', (code) => {
        record.closeCode = code;
        live.delete(ws);
      });
      serve(ws, record, rate, query.model ?? 'aura-asteria-en');
    });
  });

  function serve(ws: WebSocket, record: SpeakConnectionRecord, rate: number, model: string): void {
    const json = (m: Record<string, unknown>) => {
      if (ws.readyState !== ws.OPEN) return;
      record.sent.push(String(m.type));
      ws.send(JSON.stringify(m));
    };
    json({ type: 'Metadata', request_id: randomUUID(), model_name: model, model_version: '2025-01-01.0', model_uuid: randomUUID() });
    let text = '';
    let sequence = 0;
    let generation = 0; // bumped by Clear: audio of an older generation stops
    let chunksSent = 0;
    let work = Promise.resolve();
    const flushTimes: number[] = [];
    const abort = new AbortController();
    ws.on('close', () => abort.abort());

    async function speak(words: string, gen: number, flush: { atMs: number; firstAudioAtMs?: number }): Promise<void> {
      const audio = (await fakeSpeech(words, rate, cfg.voice)).pcm;
      const step = Math.max(1, Math.round((cfg.chunkMs * rate) / 1000));
      if (cfg.firstAudioDelayMs > 0) await clock.sleep(cfg.firstAudioDelayMs, abort.signal);
      // Chunks on a fixed timeline from the first (test/fakes/pacing.ts).
      const pacing = new Pacing(() => clock.now(), cfg.chunkIntervalMs);
      for (let at = 0; at < audio.length; at += step) {
        if (gen !== generation || ws.readyState !== ws.OPEN) return;
        const wait = pacing.slot();
        // Between chunks the fake always yields (a sleep of 0 when overdue), so a cancel is read between them.
        if (at > 0 && cfg.chunkIntervalMs > 0) await clock.sleep(wait, abort.signal);
        if (gen !== generation) return;
        if (faults.dropAfterChunks !== undefined && chunksSent >= faults.dropAfterChunks) return void ws.terminate();
        chunksSent++;
        if (faults.malformedAt !== undefined && chunksSent === faults.malformedAt) {
          record.sent.push('malformed');
          ws.send('{"type": "Flushed", "sequ');
          continue;
        }
        const piece = audio.subarray(at, at + step);
        flush.firstAudioAtMs ??= clock.now();
        record.sent.push('audio');
        ws.send(Buffer.from(piece.buffer, piece.byteOffset, piece.byteLength));
      }
      if (gen === generation) json({ type: 'Flushed', sequence_id: sequence++ });
    }

    ws.on('message', (data, binary) => {
      let m: any;
      try {
        m = binary ? undefined : JSON.parse(data.toString());
      } catch {
        m = undefined;
      }
      if (!m || typeof m.type !== 'string') return json({ type: 'Warning', description: 'Could not parse the message as JSON.', code: 'INVALID_MESSAGE' });
      switch (m.type) {
        case 'Speak':
          record.received.push(`Speak:${m.text}`);
          text += String(m.text ?? '');
          return;
        case 'Flush': {
          record.received.push('Flush');
          const now = clock.now();
          while (flushTimes.length && now - flushTimes[0]! > 60_000) flushTimes.shift();
          if (flushTimes.length >= cfg.flushLimit) return json({ type: 'Warning', description: `Exceeded the flush limit of ${cfg.flushLimit} per 60 seconds.`, code: 'FLUSH_LIMIT' });
          flushTimes.push(now);
          const words = text;
          text = '';
          const flush = { atMs: now } as { atMs: number; firstAudioAtMs?: number };
          record.flushes.push(flush);
          const gen = generation;
          work = work.then(() => speak(words, gen, flush)).catch(() => undefined);
          return;
        }
        case 'Clear': {
          record.received.push('Clear');
          text = '';
          const late = faults.lateChunksAfterClear ?? 0;
          // Frames already on the wire when Clear arrived still reach the client.
          for (let i = 0; i < late; i++) {
            record.sent.push('audio');
            ws.send(Buffer.alloc(Math.round((cfg.chunkMs * rate) / 1000) * 2, 0x11));
          }
          generation++;
          if (faults.withholdCleared) return;
          return json({ type: 'Cleared', sequence_id: sequence++ });
        }
        case 'Close':
          record.received.push('Close');
          work = work.then(() => ws.close(1000)).catch(() => undefined);
          return;
        default:
          return json({ type: 'Warning', description: `Unknown message type ${m.type}.`, code: 'UNKNOWN_MESSAGE' });
      }
    });
  }

  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `ws://127.0.0.1:${port}`,
    apiKey: cfg.apiKey,
    connections,
    refuseNext: (count, status) => void (refusals = { count, status }),
    setFaults: (f) => void (faults = { ...faults, ...f }),
    drop: () => {
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
