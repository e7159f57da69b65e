/**
 * Local stand-in for ElevenLabs' `POST /v1/text-to-speech/{voice_id}/stream/with-timestamps`,
 * speaking its real wire protocol: `xi-api-key` auth with the real 401 body, FastAPI-style 422
 * validation errors, `output_format` in the query, and a chunked body of newline-terminated JSON
 * objects `{audio_base64, alignment, normalized_alignment}` whose character times are seconds
 * from the start of the request's audio (the HTTP endpoint's convention; the WebSocket API
 * restarts them per chunk).
 *
 * The "voice" is a deterministic synthesiser, not speech: every letter or digit is a short tone
 * (`charMs`), spaces and punctuation are silence. That keeps alignment exact to the sample, so
 * tests can check word timings against the audio itself. Only `pcm_*` output formats are
 * produced; asking for mp3/opus/μ-law gets a 400 that says so. Text normalisation is not
 * modelled: `normalized_alignment` repeats `alignment`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { RealClock, type Clock } from '../../core/clock.ts';
import { Pacing } from './pacing.ts';

export const ELEVENLABS_FAKE_DEFAULTS = {
  /** The only key accepted in `xi-api-key`. */
  apiKey: 'xi-fake-elevenlabs-key',
  /** Duration of a letter or digit. */
  charMs: 60,
  /** Duration of a space. */
  spaceMs: 30,
  /** Duration of punctuation (a pause). */
  pauseMs: 120,
  /** Audio per streamed JSON object. */
  chunkMs: 200,
  /** Delay between the request and the first audio chunk. */
  firstAudioDelayMs: 0,
  /** Delay between consecutive chunks (0 = faster than real time, as the real service). */
  chunkIntervalMs: 0,
  /** Destroy the connection after this many chunks (fault injection); undefined = never. */
  dropAfterChunks: undefined as number | undefined,
  /** Write a truncated, unparseable line in place of this chunk (fault injection); undefined = never. */
  malformedChunkAt: undefined as number | undefined,
} as const;

/** PCM sample rates the real API offers as `pcm_<rate>`. */
export const ELEVENLABS_PCM_RATES = [8000, 16000, 22050, 24000, 44100, 48000] as const;

export interface ElevenLabsFakeOptions {
  readonly apiKey?: string;
  readonly charMs?: number;
  readonly spaceMs?: number;
  readonly pauseMs?: number;
  readonly chunkMs?: number;
  readonly firstAudioDelayMs?: number;
  readonly chunkIntervalMs?: number;
  readonly dropAfterChunks?: number;
  readonly malformedChunkAt?: number;
  readonly clock?: Clock;
}

export interface TTSRequestRecord {
  readonly voiceId: string;
  readonly query: Readonly<Record<string, string>>;
  readonly body: Record<string, any>;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /** `clock.now()` when the request body had arrived. */
  readonly receivedAtMs: number;
  /** `clock.now()` when the first audio chunk was written. */
  firstAudioAtMs?: number;
}

export interface ElevenLabsFake {
  /** Base URL to give the SDK (`http://127.0.0.1:<port>`). */
  readonly baseUrl: string;
  readonly apiKey: string;
  readonly requests: TTSRequestRecord[];
  /** Streams the client closed before the fake finished writing them. */
  readonly clientAborts: number;
  /** `quotaExceeded`: every request refused as ElevenLabs refuses an account out of credits (401, `quota_exceeded`). */
  setFaults(faults: { dropAfterChunks?: number | undefined; malformedChunkAt?: number | undefined; quotaExceeded?: boolean | undefined }): void;
  close(): Promise<void>;
}

export interface FakeCharTiming {
  readonly char: string;
  readonly startSample: number;
  readonly endSample: number;
}

/** Where each character of the fake voice sits, in samples (cheap: no audio rendered). */
export function planFakeSpeech(text: string, sampleRate: number, opts: { charMs?: number; spaceMs?: number; pauseMs?: number } = {}) {
  const charMs = opts.charMs ?? ELEVENLABS_FAKE_DEFAULTS.charMs;
  const spaceMs = opts.spaceMs ?? ELEVENLABS_FAKE_DEFAULTS.spaceMs;
  const pauseMs = opts.pauseMs ?? ELEVENLABS_FAKE_DEFAULTS.pauseMs;
  const timings: FakeCharTiming[] = [];
  let at = 0;
  for (const char of text) {
    const ms = /\s/.test(char) ? spaceMs : isVoiced(char) ? charMs : pauseMs;
    const n = Math.round((ms * sampleRate) / 1000);
    timings.push({ char, startSample: at, endSample: at + n });
    at += n;
  }
  return { timings, totalSamples: at };
}

function isVoiced(char: string): boolean {
  return /[\p{L}\p{N}]/u.test(char);
}

/** Renders samples [from, to) of the fake voice: a tone per letter or digit, silence otherwise. */
export function renderFakeSpeech(timings: readonly FakeCharTiming[], sampleRate: number, from: number, to: number): Int16Array {
  const out = new Int16Array(Math.max(0, to - from));
  const fade = Math.max(1, Math.round(sampleRate * 0.005));
  for (const t of timings) {
    if (t.endSample <= from || t.startSample >= to || !isVoiced(t.char)) continue;
    const step = (2 * Math.PI * (140 + (t.char.codePointAt(0)! % 24) * 15)) / sampleRate;
    const len = t.endSample - t.startSample;
    for (let s = Math.max(from, t.startSample); s < Math.min(to, t.endSample); s++) {
      const i = s - t.startSample;
      out[s - from] = Math.round(9000 * Math.min(1, i / fade, (len - i) / fade) * Math.sin(step * i));
    }
  }
  return out;
}

/** The whole fake voice for `text`: PCM plus exact per-character sample spans (tests predict with it). */
export function synthesizeFakeSpeech(text: string, sampleRate: number, opts: { charMs?: number; spaceMs?: number; pauseMs?: number } = {}) {
  const { timings, totalSamples } = planFakeSpeech(text, sampleRate, opts);
  return { pcm: renderFakeSpeech(timings, sampleRate, 0, totalSamples), timings };
}

function detail(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
    req.on('error', reject);
  });
}

const seconds = (samples: number, rate: number) => Math.round((samples / rate) * 1000) / 1000;

export async function startElevenLabsFake(options: ElevenLabsFakeOptions = {}): Promise<ElevenLabsFake> {
  const cfg = { ...ELEVENLABS_FAKE_DEFAULTS, ...options };
  const clock = options.clock ?? new RealClock();
  const requests: TTSRequestRecord[] = [];
  const sockets = new Set<Socket>();
  let faults = { dropAfterChunks: options.dropAfterChunks as number | undefined, malformedChunkAt: options.malformedChunkAt as number | undefined, quotaExceeded: undefined as boolean | undefined };
  let clientAborts = 0;
  let requestSeq = 0;

  async function handle(req: IncomingMessage, res: ServerResponse, voiceId: string, url: URL): Promise<void> {
    let body: Record<string, any>;
    try {
      body = JSON.parse(await readBody(req));
    } catch {
      return detail(res, 422, { detail: [{ type: 'json_invalid', loc: ['body', 0], msg: 'JSON decode error', input: {} }] });
    }
    if (!body || typeof body !== 'object' || typeof body.text !== 'string') {
      return detail(res, 422, { detail: [{ type: 'missing', loc: ['body', 'text'], msg: 'Field required', input: body }] });
    }
    const format = url.searchParams.get('output_format') ?? 'mp3_44100_128';
    const rate = Number(/^pcm_(\d+)$/.exec(format)?.[1]);
    if (!(ELEVENLABS_PCM_RATES as readonly number[]).includes(rate)) {
      return detail(res, 400, { detail: { status: 'invalid_output_format', message: `The fake only produces pcm_<rate> (${ELEVENLABS_PCM_RATES.join(', ')}); got ${format}.` } });
    }
    const record: TTSRequestRecord = { voiceId, query: Object.fromEntries(url.searchParams), body, headers: req.headers, receivedAtMs: clock.now() };
    requests.push(record);

    // Rendered chunk by chunk, so the fake's own work does not pass for service latency.
    const { timings, totalSamples } = planFakeSpeech(body.text, rate, cfg);
    const chunkSamples = Math.max(1, Math.round((cfg.chunkMs * rate) / 1000));
    res.writeHead(200, { 'content-type': 'application/json', 'request-id': `fake-${++requestSeq}` });
    let finished = false;
    const abort = new AbortController();
    res.on('close', () => {
      if (!finished) clientAborts++;
      abort.abort();
    });
    try {
      if (cfg.firstAudioDelayMs > 0) await clock.sleep(cfg.firstAudioDelayMs, abort.signal);
      let index = 0;
      // Chunks on a fixed timeline from the first (test/fakes/pacing.ts).
      const pacing = new Pacing(() => clock.now(), cfg.chunkIntervalMs);
      for (let start = 0; start < totalSamples; start += chunkSamples, index++) {
        const wait = pacing.slot();
        // Between chunks the fake always yields (a sleep of 0 when overdue), so a cancel is read between them.
        if (index > 0 && cfg.chunkIntervalMs > 0) await clock.sleep(wait, abort.signal);
        if (faults.dropAfterChunks !== undefined && index >= faults.dropAfterChunks) {
          finished = true;
          req.socket.destroy();
          return;
        }
        const end = Math.min(totalSamples, start + chunkSamples);
        const slice = renderFakeSpeech(timings, rate, start, end);
        const last = end >= totalSamples;
        const inChunk = timings.filter((t) => t.startSample >= start && (last || t.startSample < end));
        const alignment = inChunk.length
          ? {
              characters: inChunk.map((t) => t.char),
              character_start_times_seconds: inChunk.map((t) => seconds(t.startSample, rate)),
              character_end_times_seconds: inChunk.map((t) => seconds(t.endSample, rate)),
            }
          : null;
        const line = JSON.stringify({
          audio_base64: Buffer.from(slice.buffer, slice.byteOffset, slice.byteLength).toString('base64'),
          alignment,
          normalized_alignment: alignment,
        });
        if (index === 0) record.firstAudioAtMs = clock.now();
        const out = index === faults.malformedChunkAt ? line.slice(0, 40) : line;
        await new Promise<void>((resolve) => res.write(`${out}\n`, () => resolve()));
      }
      finished = true;
      res.end();
    } catch {
      // the client went away during a delay
    }
  }

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake');
    const key = req.headers['xi-api-key'];
    if (key !== cfg.apiKey) {
      return detail(res, 401, { detail: { status: 'invalid_api_key', message: 'Invalid API key' } });
    }
    if (faults.quotaExceeded) {
      return detail(res, 401, { detail: { status: 'quota_exceeded', message: 'This request exceeds your quota of 10000. You have 12 credits remaining, while 41 credits are required for this request.' } });
    }
    const match = /^\/v1\/text-to-speech\/([^/]+)\/stream\/with-timestamps$/.exec(url.pathname);
    if (req.method === 'POST' && match) {
      handle(req, res, decodeURIComponent(match[1]!), url).catch(() => res.destroy());
      return;
    }
    detail(res, 404, { detail: 'Not Found' });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    baseUrl: `http://127.0.0.1:${port}`,
    apiKey: cfg.apiKey,
    requests,
    get clientAborts() {
      return clientAborts;
    },
    setFaults: (f) => void (faults = { ...faults, ...f }),
    close: () => new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      server.close(() => resolve());
    }),
  };
}
