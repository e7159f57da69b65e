import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { ApiError } from './api-error.ts';
import { answerAndDestroy } from './raw-response.ts';

export type UpgradeHandler = (req: IncomingMessage, socket: Duplex, head: Buffer) => void;

/** Hop-by-hop headers of the upgrade offer, dropped when the request is served as plain HTTP. */
const UPGRADE_HEADERS = new Set(['connection', 'upgrade', 'http2-settings']);

/**
 * The one upgrade table of an HTTP server, and its one `upgrade` listener: `buildServer` declares
 * its entries (`/realtime`, `/v1/rooms/signal`) in one place. Node emits `upgrade` (instead of `request`) for
 * every request carrying `Connection: Upgrade` as soon as any listener exists, and such a socket
 * belongs to the listeners: one that nobody answers is held open forever. So endpoints do not
 * listen themselves; they register their path here, and every upgrade is either
 *
 * - claimed: the path is registered (`/realtime`, `/v1/rooms/signal`), its handler owns the socket;
 * - refused: a WebSocket offer (or an unparseable target) on any other path is answered
 *   404 `route_not_found` (400 `bad_request`) in the REST error shape, and the socket destroyed;
 * - served as plain HTTP: any other protocol offer (`Upgrade: h2c` from `curl --http2`, ...) may
 *   be ignored (RFC 9110 section 7.8), so the request is handed back to the HTTP parser without
 *   its upgrade headers and answered like any other request, body and keep-alive included.
 */
export class UpgradeDispatcher {
  private static readonly byServer = new WeakMap<Server, UpgradeDispatcher>();
  private readonly routes = new Map<string, UpgradeHandler>();

  /** The dispatcher of `server`, installed on first use. */
  static of(server: Server): UpgradeDispatcher {
    let dispatcher = UpgradeDispatcher.byServer.get(server);
    if (!dispatcher) {
      dispatcher = new UpgradeDispatcher(server);
      UpgradeDispatcher.byServer.set(server, dispatcher);
    }
    return dispatcher;
  }

  private constructor(private readonly server: Server) {
    server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => this.dispatch(req, socket, head));
  }

  /** Claims upgrades whose path (without query) is exactly `path`; returns the unregister function. */
  register(path: string, handler: UpgradeHandler): () => void {
    if (this.routes.has(path)) throw new Error(`an upgrade handler is already registered for ${path}`);
    this.routes.set(path, handler);
    return () => {
      if (this.routes.get(path) === handler) this.routes.delete(path);
    };
  }

  /** Serves `path` with `handler` from now on, whoever served it before (shutdown: 503 on /realtime). */
  replace(path: string, handler: UpgradeHandler): void {
    this.routes.set(path, handler);
  }

  get paths(): string[] {
    return [...this.routes.keys()];
  }

  private dispatch(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    let pathname: string;
    try {
      pathname = new URL(req.url ?? '/', 'http://localhost').pathname;
    } catch {
      answerAndDestroy(socket, new ApiError('bad_request', 'the request target is not a valid path'));
      return;
    }
    const handler = this.routes.get(pathname);
    if (handler) {
      try {
        handler(req, socket, head);
      } catch {
        answerAndDestroy(socket, new ApiError('internal_error', 'internal server error'));
      }
      return;
    }
    const offers = String(req.headers.upgrade ?? '').toLowerCase().split(',').map((p) => p.trim());
    if (offers.some((p) => p.startsWith('websocket'))) {
      answerAndDestroy(socket, new ApiError('route_not_found', `no WebSocket endpoint at ${pathname}`, { path: pathname }));
      return;
    }
    this.serveAsPlainRequest(req, socket, head);
  }

  /**
   * Puts the request head back in front of the unread bytes, without the upgrade headers, and
   * gives the socket to the HTTP server again: the parser reads it as an ordinary request.
   */
  private serveAsPlainRequest(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    let text = `${req.method} ${req.url} HTTP/${req.httpVersion}\r\n`;
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      if (!UPGRADE_HEADERS.has(req.rawHeaders[i]!.toLowerCase())) text += `${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}\r\n`;
    }
    socket.unshift(Buffer.concat([Buffer.from(`${text}\r\n`, 'latin1'), head]));
    this.server.emit('connection', socket);
  }
}

/** Registers an upgrade path on `server` (see `UpgradeDispatcher`); returns the unregister function. */
export function registerUpgrade(server: Server, path: string, handler: UpgradeHandler): () => void {
  return UpgradeDispatcher.of(server).register(path, handler);
}
