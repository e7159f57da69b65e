import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import { ApiError } from './api-error.ts';

/** How long a refused socket may take to take its answer before it is destroyed anyway. */
export const RAW_RESPONSE_LIMITS = { flushTimeoutMs: 5_000 } as const;

/**
 * Answers on a bare socket (no Koa, no ServerResponse: an upgrade nobody claimed, or a message
 * Node's HTTP parser refused) with the REST error shape, then releases the socket: `end()` once
 * written, `destroy()` once flushed or after `flushTimeoutMs` at the latest, so a client that
 * never reads cannot keep the descriptor.
 */
export function answerAndDestroy(socket: Duplex, error: ApiError, extraHeaders: Record<string, string> = {}): void {
  // Node removes its own error listener from upgraded or refused sockets: without one, a reset
  // by the peer while we write would be an uncaught exception.
  socket.on('error', () => undefined);
  if (socket.destroyed) return;
  const body = JSON.stringify(error.toBody());
  const headers: Record<string, string> = {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': String(Buffer.byteLength(body)),
    'Cache-Control': 'private, no-store',
    Connection: 'close',
    ...extraHeaders,
  };
  const head = `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status] ?? 'Error'}\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
  const timer = setTimeout(() => socket.destroy(), RAW_RESPONSE_LIMITS.flushTimeoutMs);
  timer.unref();
  socket.once('close', () => clearTimeout(timer));
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  socket.end(head + body, () => socket.destroy());
}
