/**
 * Local stand-in for Deepgram's live transcription WebSocket (`wss://api.deepgram.com/v1/listen`,
 * API v1), speaking its real wire protocol: `Authorization: Token <key>` (or the browser
 * `Sec-WebSocket-Protocol: token, <key>`) checked at the handshake with the real 401 body and
 * `dg-error` header; binary linear16 audio in; JSON `Results` (channel.alternatives[0].transcript,
 * words, is_final, speech_final, from_finalize), `SpeechStarted`, `UtteranceEnd` and `Metadata`
 * out; `Finalize`, `KeepAlive` and `CloseStream` control messages; close code 1011 `NET-0001`
 * after 10 s without audio or KeepAlive; 1000 after CloseStream.
 *
 * There is no speech recogniser offline, so the words are scripted. Audio is segmented by an
 * energy detector (10 ms frames against `speechThresholdDb`); the n-th utterance the fake
 * finalises (counted across all connections, so a reconnect continues the script) gets the n-th
 * script entry. Interim results reveal the entry one word at a time. Word times are spread
 * evenly over the detected speech. What the fake does NOT model: real recognition, endpointing
 * finer than `minUtteranceGapMs` (a shorter `endpointing` is raised to it so one scripted
 * utterance is never split), encodings other than linear16, multichannel results (channel 0 is
 * analysed), and its 400 messages are its own wording.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { randomUUID } from 'node:crypto';
import { WebSocketServer, type WebSocket } from 'ws';
import { RealClock, type Clock, type TimerHandle } from '../../core/clock.ts';

export const DEEPGRAM_FAKE_DEFAULTS = {
  /** The only key accepted. */
  apiKey: 'dg-fake-deepgram-key',
  /** RMS level of a 10 ms frame, in dBFS, above which the frame is speech. */
  speechThresholdDb: -40,
  /** Silence that ends an utterance, and the floor applied to the client's `endpointing`. */
  minUtteranceGapMs: 300,
  /** Voiced audio shorter than this is ignored as a click. */
  minSpeechMs: 60,
  /** Audio between two interim results of one utterance. */
  interimIntervalMs: 300,
  /** Latency from the endpoint (or Finalize / CloseStream) to the final Results message. */
  finalDelayMs: 0,
  /** Latency of interim results. */
  interimDelayMs: 0,
  /** No audio and no KeepAlive for this long closes the socket with 1011 NET-0001. */
  inactivityTimeoutMs: 10_000,
  /** Terminate the TCP connection once this much audio arrived (fault injection); undefined = never. */
  dropAfterAudioMs: undefined as number | undefined,
} as const;

export interface ScriptedUtterance {
  /** 0-based, counted across every connection of this fake. */
  readonly index: number;
  readonly language: string;
  readonly durationMs: number;
}

export interface DeepgramFakeOptions {
  readonly apiKey?: string;
  readonly speechThresholdDb?: number;
  readonly minUtteranceGapMs?: number;
  readonly minSpeechMs?: number;
  readonly interimIntervalMs?: number;
  readonly finalDelayMs?: number;
  readonly interimDelayMs?: number;
  readonly inactivityTimeoutMs?: number;
  readonly dropAfterAudioMs?: number;
  /** Transcript of the n-th utterance: a list (the last entry repeats) or a function. */
  readonly script?: readonly string[] | ((u: ScriptedUtterance) => string);
  readonly clock?: Clock;
}

export interface ListenConnectionRecord {
  readonly query: Readonly<Record<string, string>>;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  /** Audio bytes received. */
  audioBytes: number;
  /** Control message types received, in order (`Finalize`, `KeepAlive`, `CloseStream`). */
  readonly controls: string[];
  /** Every message sent to the client. */
  readonly sent: Array<Record<string, unknown>>;
  closeCode?: number;
}

export interface DeepgramFake {
  /** WebSocket base URL for the SDK's `baseUrl` (`ws://127.0.0.1:<port>`). */
  readonly url: string;
  readonly apiKey: string;
  readonly connections: ListenConnectionRecord[];
  /** Final transcripts produced so far, in order. */
  readonly finals: string[];
  /** For each final: `clock.now()` when its cause (endpoint audio, Finalize, CloseStream) arrived, and when it was sent. */
  readonly finalTimings: Array<{ text: string; triggeredAtMs: number; sentAtMs?: number }>;
  /** Terminates every open connection abruptly (client sees 1006). */
  drop(): void;
  /** The next `count` handshakes are refused with `status`. */
  refuseNext(count: number, status: number): void;
  setFaults(faults: { dropAfterAudioMs?: number | undefined }): void;
  /**
   * Handshakes from now on wait (a server slow to accept) until the returned function is called;
   * `held` counts those waiting.
   */
  holdHandshakes(): () => void;
  readonly held: number;
  close(): Promise<void>;
}

const FRAME_MS = 10;
const CHANNEL = [0, 1];

export function rejectUpgrade(socket: Socket, status: number, reason: string, errCode: string, message: string): void {
  const requestId = randomUUID();
  const body = JSON.stringify({ err_code: errCode, err_msg: message, request_id: requestId });
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ndg-error: ${message}\r\ndg-request-id: ${requestId}\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

export function authorized(req: IncomingMessage, apiKey: string): boolean {
  const auth = req.headers.authorization;
  if (auth && /^token\s+/i.test(auth)) return auth.replace(/^token\s+/i, '') === apiKey;
  const protocols = String(req.headers['sec-websocket-protocol'] ?? '').split(',').map((p) => p.trim());
  return protocols[0] === 'token' && protocols[1] === apiKey;
}

export async function startDeepgramFake(options: DeepgramFakeOptions = {}): Promise<DeepgramFake> {
  const cfg = { ...DEEPGRAM_FAKE_DEFAULTS, ...options };
  const clock = options.clock ?? new RealClock();
  const connections: ListenConnectionRecord[] = [];
  const finals: string[] = [];
  const finalTimings: DeepgramFake['finalTimings'] = [];
  const live = new Set<WebSocket>();
  const sockets = new Set<Socket>();
  let faults = { dropAfterAudioMs: options.dropAfterAudioMs as number | undefined };
  let refusals = { count: 0, status: 503 };
  let utteranceCount = 0;

  const scriptFor = (u: ScriptedUtterance): string => {
    const s = options.script;
    if (typeof s === 'function') return s(u);
    if (s?.length) return s[Math.min(u.index, s.length - 1)]!;
    return `utterance ${u.index + 1}`;
  };

  const wss = new WebSocketServer({ noServer: true, handleProtocols: (protocols) => (protocols.has('token') ? 'token' : false) });
  const server: Server = createServer((_req, res) => {
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ err_code: 'NOT_FOUND', err_msg: 'Not found.' }));
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });

  let hold: Promise<void> | null = null;
  let heldCount = 0;
  server.on('upgrade', (req, socket: Socket, head) => {
    if (hold) {
      heldCount++;
      void hold.then(() => {
        heldCount--;
        if (!socket.destroyed) server.emit('upgrade', req, socket, head);
      });
      return;
    }
    const url = new URL(req.url ?? '/', 'http://fake');
    if (url.pathname !== '/v1/listen') return rejectUpgrade(socket, 404, 'Not Found', 'NOT_FOUND', 'Not found.');
    if (!authorized(req, cfg.apiKey)) return rejectUpgrade(socket, 401, 'Unauthorized', 'INVALID_AUTH', 'Invalid credentials.');
    if (refusals.count > 0) {
      refusals.count--;
      return rejectUpgrade(socket, refusals.status, 'Service Unavailable', 'SERVICE_UNAVAILABLE', 'The fake was told to refuse this connection.');
    }
    const query = Object.fromEntries(url.searchParams);
    const sampleRate = Number(query.sample_rate);
    if (query.encoding !== 'linear16') {
      return rejectUpgrade(socket, 400, 'Bad Request', 'Bad Request', `The fake only decodes encoding=linear16 (got ${query.encoding ?? 'none'}).`);
    }
    if (!Number.isInteger(sampleRate) || sampleRate < 8000 || sampleRate > 48000) {
      return rejectUpgrade(socket, 400, 'Bad Request', 'Bad Request', 'sample_rate must be given with encoding=linear16.');
    }
    wss.handleUpgrade(req, socket, head, (ws) => {
      const record: ListenConnectionRecord = { query, headers: req.headers, audioBytes: 0, controls: [], sent: [] };
      connections.push(record);
      live.add(ws);
      ws.on('close', (code) => {
        record.closeCode = code;
        live.delete(ws);
      });
      new ListenSession(ws, record);
    });
  });

  /** One live transcription connection. */
  class ListenSession {
    private readonly requestId = randomUUID();
    private readonly rate: number;
    private readonly channels: number;
    private readonly frameLen: number;
    private readonly gapSamples: number;
    private readonly interimSamples: number;
    private readonly utteranceEndSamples: number | undefined;
    private readonly speechFinal: boolean;
    private readonly punctuate: boolean;
    private readonly interim: boolean;
    private readonly language: string;
    private carry = Buffer.alloc(0);
    private frameSumSq = 0;
    private frameCount = 0;
    private samples = 0; // per channel
    private inSpeech = false;
    private speechStart = 0;
    private lastVoiced = 0;
    private voiced = 0;
    private interims = 0;
    private nextInterimAt = 0;
    private lastWordEnd: number | undefined;
    /** Start of the audio window the next Results covers: where the previous final ended. */
    private windowStart = 0;
    private lastDue = 0;
    private inactivity: TimerHandle | undefined;
    private closed = false;

    constructor(private readonly ws: WebSocket, private readonly record: ListenConnectionRecord) {
      const q = record.query;
      this.rate = Number(q.sample_rate);
      this.channels = Math.max(1, Number(q.channels ?? 1) || 1);
      this.frameLen = Math.round((this.rate * FRAME_MS) / 1000);
      const endpointing = q.endpointing === 'false' ? undefined : Number(q.endpointing ?? 10);
      this.speechFinal = endpointing !== undefined;
      this.gapSamples = this.ms(Math.max(endpointing ?? 0, cfg.minUtteranceGapMs));
      this.interimSamples = this.ms(cfg.interimIntervalMs);
      this.interim = q.interim_results === 'true';
      this.utteranceEndSamples = q.utterance_end_ms && this.interim ? this.ms(Number(q.utterance_end_ms)) : undefined;
      this.punctuate = q.punctuate === 'true' || q.smart_format === 'true';
      this.language = q.language ?? 'en';
      ws.on('message', (data: Buffer, isBinary) => this.onMessage(data, isBinary));
      ws.on('close', () => this.stop());
      this.touch();
    }

    private ms(ms: number): number {
      return Math.round((ms * this.rate) / 1000);
    }

    private sec(samples: number): number {
      return Math.round((samples / this.rate) * 1000) / 1000;
    }

    private touch(): void {
      clock.clearTimeout(this.inactivity);
      this.inactivity = clock.setTimeout(() => {
        this.send({ type: 'Metadata', ...this.metadata() }, 0);
        this.closeWith(1011, 'NET-0001: Deepgram did not receive audio data or a text message within the timeout window.');
      }, cfg.inactivityTimeoutMs);
    }

    private stop(): void {
      this.closed = true;
      clock.clearTimeout(this.inactivity);
    }

    private closeWith(code: number, reason: string): void {
      // Queued messages go first: the close waits behind them.
      const due = Math.max(clock.now(), this.lastDue);
      const close = () => {
        if (this.ws.readyState === this.ws.OPEN) this.ws.close(code, reason);
      };
      if (due <= clock.now()) close();
      else clock.setTimeout(close, due - clock.now());
      this.stop();
    }

    /** Sends in order: a message never overtakes one queued before it. */
    private send(msg: Record<string, unknown>, delayMs: number, onSent?: () => void): void {
      const due = Math.max(clock.now() + delayMs, this.lastDue);
      this.lastDue = due;
      const write = () => {
        if (this.ws.readyState !== this.ws.OPEN) return;
        onSent?.();
        this.record.sent.push(msg);
        this.ws.send(JSON.stringify(msg));
      };
      if (due <= clock.now()) write();
      else clock.setTimeout(write, due - clock.now());
    }

    private onMessage(data: Buffer, isBinary: boolean): void {
      if (this.closed) return;
      this.touch();
      if (!isBinary) {
        let type: unknown;
        try {
          type = JSON.parse(data.toString('utf8'))?.type;
        } catch {
          return; // not JSON: ignored, as the service does with unknown text
        }
        if (typeof type !== 'string') return;
        this.record.controls.push(type);
        if (type === 'Finalize') this.finish('finalize');
        else if (type === 'CloseStream') this.closeStream();
        return;
      }
      // An empty binary message is the legacy way to say CloseStream.
      if (data.length === 0) return this.closeStream();
      this.record.audioBytes += data.length;
      this.analyse(data);
      const limit = faults.dropAfterAudioMs;
      if (limit !== undefined && (this.record.audioBytes / 2 / this.channels / this.rate) * 1000 >= limit) {
        this.stop();
        this.ws.terminate();
      }
    }

    private closeStream(): void {
      this.finish('close');
      this.send({ type: 'Metadata', ...this.metadata() }, 0);
      this.closeWith(1000, '');
    }

    private metadata() {
      return {
        transaction_key: 'deprecated', request_id: this.requestId,
        sha256: 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
        created: new Date().toISOString(), duration: this.sec(this.samples), channels: this.channels,
      };
    }

    private analyse(data: Buffer): void {
      const bytes = this.carry.length ? Buffer.concat([this.carry, data]) : data;
      const frameBytes = 2 * this.channels;
      const usable = bytes.length - (bytes.length % frameBytes);
      this.carry = Buffer.from(bytes.subarray(usable));
      for (let off = 0; off < usable; off += frameBytes) {
        const s = bytes.readInt16LE(off) / 32768; // channel 0
        this.frameSumSq += s * s;
        this.samples++;
        if (++this.frameCount === this.frameLen) {
          const db = 10 * Math.log10(this.frameSumSq / this.frameCount + 1e-12);
          this.onFrame(db >= cfg.speechThresholdDb);
          this.frameSumSq = 0;
          this.frameCount = 0;
        }
      }
    }

    private onFrame(speech: boolean): void {
      const end = this.samples;
      if (speech) {
        if (!this.inSpeech) {
          this.inSpeech = true;
          this.speechStart = end - this.frameLen;
          this.voiced = 0;
          this.interims = 0;
          this.nextInterimAt = this.speechStart + this.interimSamples;
          if (this.record.query.vad_events === 'true') this.send({ type: 'SpeechStarted', channel: CHANNEL, timestamp: this.sec(this.speechStart) }, 0);
        }
        this.lastVoiced = end;
        this.voiced += this.frameLen;
        this.lastWordEnd = undefined; // speech resumed: no UtteranceEnd for the earlier words
        if (this.interim && end >= this.nextInterimAt && this.voiced >= this.ms(cfg.minSpeechMs)) {
          this.nextInterimAt += this.interimSamples;
          this.interims++;
          this.sendResults(false, false, false, this.interims);
        }
        return;
      }
      if (this.inSpeech && end - this.lastVoiced >= this.gapSamples) this.finish('endpoint');
      if (this.lastWordEnd !== undefined && this.utteranceEndSamples !== undefined && end - this.lastWordEnd >= this.utteranceEndSamples) {
        this.send({ type: 'UtteranceEnd', channel: CHANNEL, last_word_end: this.sec(this.lastWordEnd) }, 0);
        this.lastWordEnd = undefined;
      }
    }

    /** Ends the current utterance with a final result, if there is one worth transcribing. */
    private finish(cause: 'endpoint' | 'finalize' | 'close'): void {
      if (!this.inSpeech) return;
      this.inSpeech = false;
      if (this.voiced < this.ms(cfg.minSpeechMs)) return;
      this.sendResults(true, cause === 'endpoint' && this.speechFinal, cause === 'finalize');
      this.lastWordEnd = this.lastVoiced;
    }

    private sendResults(isFinal: boolean, speechFinal: boolean, fromFinalize: boolean, revealWords = Infinity): void {
      const index = isFinal ? utteranceCount++ : utteranceCount;
      const endSample = isFinal ? this.lastVoiced : this.samples;
      const full = scriptFor({ index, language: this.language, durationMs: ((endSample - this.speechStart) / this.rate) * 1000 });
      const spoken = full.split(/\s+/).filter(Boolean).slice(0, revealWords);
      const plain = (w: string) => w.toLowerCase().replace(/[^\p{L}\p{N}'-]/gu, '');
      const span = (endSample - this.speechStart) / Math.max(1, spoken.length);
      const words = spoken.map((w, i) => ({
        word: plain(w),
        start: this.sec(this.speechStart + i * span),
        end: this.sec(this.speechStart + (i + 1) * span),
        confidence: 0.98,
        ...(this.punctuate ? { punctuated_word: w } : {}),
      }));
      const transcript = this.punctuate ? spoken.join(' ') : words.map((w) => w.word).join(' ');
      const windowStart = this.windowStart;
      if (isFinal) this.windowStart = endSample;
      let timing: (typeof finalTimings)[number] | undefined;
      if (isFinal) {
        finals.push(transcript);
        timing = { text: transcript, triggeredAtMs: clock.now() };
        finalTimings.push(timing);
      }
      this.send({
        type: 'Results',
        channel_index: CHANNEL,
        duration: this.sec(endSample - windowStart),
        start: this.sec(windowStart),
        is_final: isFinal,
        speech_final: speechFinal,
        channel: { alternatives: [{ transcript, confidence: 0.98, words }] },
        metadata: { request_id: this.requestId, model_info: { name: this.record.query.model ?? 'general', version: 'fake', arch: 'fake' }, model_uuid: '00000000-0000-0000-0000-000000000000' },
        from_finalize: fromFinalize,
      }, isFinal ? cfg.finalDelayMs : cfg.interimDelayMs, timing ? () => (timing.sentAtMs = clock.now()) : undefined);
    }
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `ws://127.0.0.1:${port}`,
    apiKey: cfg.apiKey,
    connections,
    finals,
    finalTimings,
    drop: () => {
      for (const ws of live) ws.terminate();
    },
    refuseNext: (count, status) => void (refusals = { count, status }),
    setFaults: (f) => void (faults = { ...faults, ...f }),
    holdHandshakes: () => {
      let release!: () => void;
      hold = new Promise<void>((resolve) => (release = resolve));
      return () => {
        hold = null;
        release();
      };
    },
    get held() {
      return heldCount;
    },
    close: () => new Promise<void>((resolve) => {
      for (const ws of live) ws.terminate();
      for (const s of sockets) s.destroy();
      wss.close();
      server.close(() => resolve());
    }),
  };
}
