/**
 * SvcClient: the low-level real-time face-model client. It owns the WebSocket and the wire
 * protocol and nothing else: 16 kHz mono int16 PCM in, raw protocol messages out (JSON control
 * messages and decoded frames carrying JPEG video and PCM audio).
 */
import { Observable, Subject } from 'rxjs';
import WebSocket from 'ws';
import { resolveOptions } from '../../core/options.ts';
import {
  decodeFrameOut,
  encodeAudioIn,
  parseServerMessage,
  URL_KEY_PARAMETER_NAMES,
  REALTIME_LIMITS,
  type ClientMessage,
  type FrameOutMessage,
  type ServerMessage,
  type SessionReadyMessage,
  type WebRTCSettings,
} from '../../protocol/realtime.ts';

export const SVC_CLIENT_DEFAULTS = {
  /** `{models_ws_url}/realtime`; override with the `url` option or SVC_REALTIME_URL. */
  url: 'ws://127.0.0.1:8080/realtime',
  /** How long `connect()` waits for session_ready (ms). */
  connectTimeoutMs: 15_000,
  /** A `ping` this often keeps an idle session under the server's idle timeout (5 min). */
  keepAliveMs: 30_000,
  /**
   * Nothing at all from the server (no frame, no pong) for this many keep-alive periods: the
   * connection is taken for lost (a NAT that forgot it, a sleeping laptop, a half-open socket),
   * ended, and reported as a fatal error, instead of waiting out the kernel's timeout (minutes).
   */
  silentPeriods: 2.5,
} as const;


export type RealtimeMessage = ServerMessage | { readonly type: 'frame'; readonly frame: FrameOutMessage };

export interface SvcClientOptions {
  readonly apiKey: string;
  readonly configId: string;
  readonly url?: string;
  readonly connectTimeoutMs?: number;
  /** Interval of keep-alive pings (default 30 s); 0 disables them. */
  readonly keepAliveMs?: number;
  /**
   * Direct WebRTC: the service publishes the avatar into this room instead of returning frames
   * over the socket; `webrtc_connected` (WEBRTC_CONNECTED) confirms it.
   */
  readonly webrtc?: WebRTCSettings;
}

export class SvcClientError extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
    this.name = 'SvcClientError';
  }
}

export class SvcClient {
  private ws: WebSocket | undefined;
  private readonly subject = new Subject<RealtimeMessage>();
  private sequence = 0;
  private keepAlive: NodeJS.Timeout | undefined;
  private lastHeardAt = 0;
  /** The server said why it ends the session (a fatal error): its close needs no second report. */
  private fatalSeen = false;
  ready: SessionReadyMessage | undefined;

  /** SVC_CLIENT_DEFAULTS with the options over them (the url also from SVC_REALTIME_URL). */
  private readonly settings: { url: string; connectTimeoutMs: number; keepAliveMs: number };

  constructor(private readonly options: SvcClientOptions) {
    this.settings = resolveOptions(SVC_CLIENT_DEFAULTS, { url: options.url ?? process.env.SVC_REALTIME_URL, connectTimeoutMs: options.connectTimeoutMs, keepAliveMs: options.keepAliveMs });
  }

  /** Every message from the server, in order; completes when the connection closes. */
  get messages$(): Observable<RealtimeMessage> {
    return this.subject.asObservable();
  }

  get isConnected(): boolean {
    return this.ws?.readyState === WebSocket.OPEN && this.ready !== undefined;
  }

  /** Opens the socket and resolves with session_ready (rejects with the server's typed error). */
  connect(): Promise<SessionReadyMessage> {
    const base = this.settings.url;
    const url = new URL(base);
    // A key in the URL would reach proxies' and servers' logs (the server refuses it anyway): refused here first.
    const carried = [...url.searchParams.keys()].find((name) => URL_KEY_PARAMETER_NAMES.has(name.toLowerCase()));
    if (carried !== undefined) return Promise.reject(new SvcClientError('auth_failed', `never put an API key or token in the URL (query parameter ${carried}); the client sends the key in the X-API-Key header`));
    url.searchParams.set('config_id', this.options.configId);
    const ws = new WebSocket(url, { headers: { 'X-API-Key': this.options.apiKey } });
    this.ws = ws;
    return new Promise<SessionReadyMessage>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new SvcClientError('timeout', `no session_ready within ${this.settings.connectTimeoutMs} ms`));
        ws.terminate();
      }, this.settings.connectTimeoutMs);
      let settled = false;
      const settle = (fn: () => void) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        fn();
      };
      ws.on('message', (data, isBinary) => {
        this.lastHeardAt = Date.now();
        let message: RealtimeMessage;
        try {
          const bytes = data instanceof Buffer ? data : Buffer.concat(data as Buffer[]);
          message = isBinary ? { type: 'frame', frame: decodeFrameOut(new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength)) } : parseServerMessage(bytes.toString('utf8'));
        } catch (err) {
          this.subject.next({ type: 'error', code: 'malformed_message', message: `undecodable server message: ${(err as Error).message}`, fatal: false });
          return;
        }
        if (message.type === 'session_ready') {
          this.ready = message;
          // Never slower than a third of the server's advertised idle timeout.
          const serverIdle = typeof message.limits?.idleTimeoutMs === 'number' ? message.limits.idleTimeoutMs / 3 : Infinity;
          const every = Math.min(this.settings.keepAliveMs, serverIdle);
          if (every > 0) {
            const bound = every * SVC_CLIENT_DEFAULTS.silentPeriods;
            const silent = () => Date.now() - this.lastHeardAt > bound;
            this.keepAlive = setInterval(() => {
              if (silent()) {
                // Judged once this turn's input is read (setImmediate runs after the poll phase):
                // timers run first, and a process that was itself stalled past the bound (a busy
                // loop, a laptop waking) has the server's answer waiting in its socket.
                setImmediate(() => {
                  if (this.fatalSeen || ws.readyState !== WebSocket.OPEN || !silent()) return;
                  clearInterval(this.keepAlive);
                  this.fatalSeen = true;
                  this.subject.next({ type: 'error', code: 'internal_error', message: `connection lost: nothing from the server for ${Math.round(Date.now() - this.lastHeardAt)} ms`, fatal: true });
                  ws.terminate();
                });
                return;
              }
              this.send({ type: 'ping' });
            }, every);
          }
          if (this.options.webrtc) this.send({ type: 'webrtc', settings: this.options.webrtc });
          settle(() => resolve(message));
        } else if (message.type === 'error' && message.fatal) {
          this.fatalSeen = true;
          settle(() => reject(new SvcClientError(message.code, message.message)));
        }
        this.subject.next(message);
      });
      ws.on('error', (err) => {
        settle(() => reject(new SvcClientError('transport_error', err.message)));
        this.subject.next({ type: 'error', code: 'internal_error', message: `transport error: ${err.message}`, fatal: true });
      });
      ws.on('close', (code, reason) => {
        settle(() => reject(new SvcClientError('closed', `connection closed (${code} ${reason.toString()})`)));
        // An abnormal close after the session was ready (1006: the socket dropped) is an error too,
        // not only the end of the stream.
        if (this.ready !== undefined && code !== 1000 && code !== 1001 && !this.fatalSeen) {
          this.subject.next({ type: 'error', code: 'internal_error', message: `connection lost (${code}${reason.length ? ` ${reason.toString()}` : ''})`, fatal: true });
        }
        this.ready = undefined;
        clearInterval(this.keepAlive);
        this.subject.complete();
      });
    });
  }

  /** Sends 16 kHz mono int16 PCM; `endOfTurn` ends the turn after this chunk. */
  sendAudio(pcm16k: Int16Array, endOfTurn = false): void {
    const max = (REALTIME_LIMITS.audioSampleRate * REALTIME_LIMITS.maxAudioChunkMs) / 1000; // the most one message may carry
    if (pcm16k.length === 0) {
      this.sendBinary(encodeAudioIn(pcm16k, this.sequence++, endOfTurn));
      return;
    }
    for (let i = 0; i < pcm16k.length; i += max) {
      const last = i + max >= pcm16k.length;
      this.sendBinary(encodeAudioIn(pcm16k.subarray(i, i + max), this.sequence++, endOfTurn && last));
    }
  }

  send(message: ClientMessage): boolean {
    if (this.ws?.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(message));
    return true;
  }

  startTurn(): boolean {
    return this.send({ type: 'start_turn' });
  }

  endTurn(): boolean {
    return this.send({ type: 'end_turn' });
  }

  cancel(): boolean {
    return this.send({ type: 'cancel' });
  }

  /** Asks the server to finish what was sent, then close. */
  end(): boolean {
    return this.send({ type: 'end' });
  }

  close(): void {
    this.ws?.close(1000, 'client closed');
  }

  private sendBinary(bytes: Uint8Array): void {
    if (this.ws?.readyState !== WebSocket.OPEN) throw new SvcClientError('not_connected', 'not connected');
    this.ws.send(bytes);
  }
}
