/** A raw WebSocket connection to /realtime that records every message (test helper, not a test). */
import WebSocket from 'ws';
import { decodeFrameOut, type FrameOutMessage, type ServerMessage } from '../../protocol/realtime.ts';

export interface Conn {
  ws: WebSocket;
  messages: ServerMessage[];
  frames: FrameOutMessage[];
  closed: Promise<{ code: number; reason: string }>;
  next(predicate: (m: ServerMessage) => boolean, timeoutMs?: number): Promise<ServerMessage>;
  framesUntil(predicate: (f: FrameOutMessage) => boolean, timeoutMs?: number): Promise<FrameOutMessage>;
}

export function connectRaw(url: string, headers: Record<string, string>): Conn {
  const ws = new WebSocket(url, { headers });
  const messages: ServerMessage[] = [];
  const frames: FrameOutMessage[] = [];
  const waiters: Array<() => void> = [];
  ws.on('error', () => undefined); // a refused or reset connection is observed through `closed`
  ws.on('message', (data, isBinary) => {
    const bytes = data as Buffer;
    if (isBinary) frames.push(decodeFrameOut(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength)));
    else messages.push(JSON.parse(bytes.toString('utf8')));
    for (const w of waiters.splice(0)) w();
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  const waitFor = <T>(find: () => T | undefined, timeoutMs: number, what: string): Promise<T> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}; messages: ${JSON.stringify(messages).slice(0, 500)}`)), timeoutMs);
      const check = () => {
        const hit = find();
        if (hit !== undefined) {
          clearTimeout(timer);
          resolve(hit);
        } else waiters.push(check);
      };
      check();
    });
  return {
    ws,
    messages,
    frames,
    closed,
    next: (p, timeoutMs = 15_000) => waitFor(() => messages.find(p), timeoutMs, 'a message'),
    framesUntil: (p, timeoutMs = 15_000) => waitFor(() => frames.find(p), timeoutMs, 'a frame'),
  };
}

export const isError = (code: string) => (m: ServerMessage) => m.type === 'error' && m.code === code;
export const isReady = (m: ServerMessage) => m.type === 'session_ready';

/** A voiced test signal (16 kHz) with no exact zeros in it. */
export const tone = (ms: number) =>
  Int16Array.from({ length: (ms * 16_000) / 1000 }, (_, i) => Math.round(9000 * Math.sin((2 * Math.PI * 180 * i) / 16_000 + 0.3) * (0.6 + 0.4 * Math.sin(i / 700))) || 1);

export const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));
