/**
 * What the speech-to-speech fakes share: a server-side turn detector on the user's audio (an
 * energy detector standing in for the provider's VAD), the scripted bot voice, a polyglot
 * listener that serves plain HTTP and TLS on one port, and a throw-away self-signed certificate.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createNetServer, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { synthesizeFakeSpeech } from './elevenlabs.ts';

export const S2S_TURN_DEFAULTS = {
  /** A 10 ms window louder than this (dBFS) is speech. */
  speechThresholdDb: -40,
  /** Speech this long (ms) starts a user turn. */
  minSpeechMs: 30,
  /** Silence this long (ms) ends it (OpenAI's server_vad default silence_duration_ms). */
  silenceMs: 500,
} as const;

export type TurnEvent = { type: 'start'; atMs: number } | { type: 'stop'; atMs: number };

/** Energy-based user-turn detector over mono int16 audio; times are ms of audio received. */
export class EnergyTurnDetector {
  private receivedMs = 0;
  private speechRunMs = 0;
  private silenceRunMs = 0;
  private speaking = false;
  private carry = new Int16Array(0);

  constructor(private readonly sampleRate: number, private readonly opts: { speechThresholdDb?: number; minSpeechMs?: number; silenceMs?: number } = {}) {}

  get audioMs(): number {
    return this.receivedMs;
  }

  get inSpeech(): boolean {
    return this.speaking;
  }

  push(pcm: Int16Array): TurnEvent[] {
    const win = Math.round(this.sampleRate / 100);
    const all = new Int16Array(this.carry.length + pcm.length);
    all.set(this.carry);
    all.set(pcm, this.carry.length);
    const events: TurnEvent[] = [];
    let i = 0;
    const threshold = this.opts.speechThresholdDb ?? S2S_TURN_DEFAULTS.speechThresholdDb;
    for (; i + win <= all.length; i += win) {
      let sum = 0;
      for (let k = i; k < i + win; k++) sum += (all[k]! / 32768) ** 2;
      const db = 10 * Math.log10(sum / win + 1e-12);
      this.receivedMs += 10;
      if (db > threshold) {
        this.speechRunMs += 10;
        this.silenceRunMs = 0;
        if (!this.speaking && this.speechRunMs >= (this.opts.minSpeechMs ?? S2S_TURN_DEFAULTS.minSpeechMs)) {
          this.speaking = true;
          events.push({ type: 'start', atMs: this.receivedMs - this.speechRunMs });
        }
      } else {
        this.speechRunMs = 0;
        this.silenceRunMs += 10;
        if (this.speaking && this.silenceRunMs >= (this.opts.silenceMs ?? S2S_TURN_DEFAULTS.silenceMs)) {
          this.speaking = false;
          events.push({ type: 'stop', atMs: this.receivedMs - this.silenceRunMs });
        }
      }
    }
    this.carry = all.slice(i);
    return events;
  }
}

/** The scripted bot voice for `text` at `sampleRate` (tones per letter, silence between words). */
export function fakeBotVoice(text: string, sampleRate: number): Int16Array {
  return synthesizeFakeSpeech(text, sampleRate, { charMs: 45, spaceMs: 40, pauseMs: 120 }).pcm;
}

let certificate: { key: string; cert: string } | undefined;

/** A self-signed certificate for 127.0.0.1, made once per process with the openssl CLI. */
export function selfSignedCertificate(): { key: string; cert: string } {
  if (certificate) return certificate;
  const dir = mkdtempSync(join(tmpdir(), 's2s-fake-tls-'));
  try {
    execFileSync('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
      '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1',
      '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'),
    ], { stdio: 'ignore' });
    certificate = { key: readFileSync(join(dir, 'key.pem'), 'utf8'), cert: readFileSync(join(dir, 'cert.pem'), 'utf8') };
    return certificate;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export interface PolyglotListener {
  readonly port: number;
  close(): Promise<void>;
}

/**
 * One port, two protocols, as a vendor's host serves both its REST API and its WebSocket over
 * TLS: a connection whose first byte is a TLS handshake goes to the HTTPS server, anything else
 * to plain HTTP (SDKs that force `wss://` on the socket while REST follows the base URL's scheme).
 */
export async function listenPolyglot(
  onRequest: (req: IncomingMessage, res: ServerResponse) => void,
  onUpgrade: (req: IncomingMessage, socket: Duplex, head: Buffer) => void,
): Promise<PolyglotListener> {
  const tls = selfSignedCertificate();
  const plain: HttpServer = createHttpServer(onRequest);
  const secure = createHttpsServer({ key: tls.key, cert: tls.cert }, onRequest);
  plain.on('upgrade', onUpgrade);
  secure.on('upgrade', onUpgrade);
  const sockets = new Set<Socket>();
  const net = createNetServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.once('data', (first: Buffer) => {
      socket.pause();
      socket.unshift(first);
      (first[0] === 0x16 ? secure : plain).emit('connection', socket);
      process.nextTick(() => socket.resume());
    });
  });
  await new Promise<void>((resolve) => net.listen(0, '127.0.0.1', resolve));
  return {
    port: (net.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        plain.close();
        secure.close();
        net.close(() => resolve());
      }),
  };
}
