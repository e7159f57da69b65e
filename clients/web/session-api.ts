/**
 * The widget's side of the Session API (docs/widget.md): the connect request, with the bounded
 * queue on `429 concurrency_limit` and `503 server_busy` (wait what the server names, clamped,
 * then ask again, until the queue timeout), and the release of a session's room (fetch with
 * keepalive, or a beacon when the page is going away). One per call (call.ts), which owns the
 * setup timer, the marks and the outcome; this module only talks to the service.
 */
import { OUTCOMES, type FaultDomain, type Outcome } from './events.ts';
import { roomNameOf } from './transport.ts';

export const SESSION_API_DEFAULTS = {
  /** Wait between queued retries when the server names none; server values are clamped to 1..30 s. */
  defaultRetryAfterS: 5,
  minRetryAfterS: 1,
  maxRetryAfterS: 30,
} as const;

export interface SessionGrant {
  readonly session_id: string;
  readonly room_url: string;
  readonly token: string;
}

/** A setup step that failed, and the outcome the call ends with. */
export class CallFailure extends Error {
  constructor(
    readonly outcome: Outcome,
    readonly faultDomain: FaultDomain = OUTCOMES[outcome],
  ) {
    super(outcome);
  }
}

export interface SessionRequest {
  readonly endpoint: string;
  readonly agentId: string;
  readonly clientUserRef: string | null;
  readonly authToken: string | null;
  /** Longest total wait in the queue. */
  readonly queueTimeoutMs: number;
}

/** What the connect loop tells its call, and asks of it. */
export interface SessionRequestHooks {
  /** True once the call ended: no further attempt, and a late grant is released. */
  ended(): boolean;
  /** Before each request (the call arms its setup timer and marks the request). */
  attempt(): void;
  /** The request was answered with a grant (the call marks the response). */
  answered(): void;
  /** Each wait in the queue (true: the call pauses its setup timer, re-armed by the next attempt), and its end (false). */
  queuing(on: boolean): void;
  /** Aborted when the call ends: a queued wait stops at once. */
  readonly signal: AbortSignal;
}

const isString = (v: unknown): v is string => typeof v === 'string';
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);
export const offline = () => typeof navigator !== 'undefined' && navigator.onLine === false;

export class SessionApi {
  /** Connect requests sent. */
  attempts = 0;
  /** Status of the last connect answer (null before one). */
  httpStatus: number | null = null;
  /** Time spent in the queue so far (ms). */
  queuedMs = 0;
  private queuedSince: number | null = null;

  constructor(
    private readonly request: SessionRequest,
    private readonly hooks: SessionRequestHooks,
  ) {}

  /** Asks for a session until one is granted; throws CallFailure with the outcome otherwise. */
  async connect(): Promise<SessionGrant> {
    const { endpoint, agentId, clientUserRef, authToken } = this.request;
    const body = JSON.stringify({ agent_id: agentId, ...(clientUserRef ? { client_user_ref: clientUserRef } : {}), ...(authToken ? { auth_token: authToken } : {}) });
    for (;;) {
      if (this.hooks.ended()) throw new CallFailure('cancelled');
      this.hooks.attempt();
      this.attempts++;
      let response: Response;
      // Not aborted when the call ends meanwhile (hang-up, setup timeout): the server may admit
      // the session anyway, and only the response names the room to release.
      try {
        response = await fetch(`${endpoint}/v1/public/agents/connect`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body, credentials: 'omit' });
      } catch {
        throw new CallFailure('network_error', offline() ? 'client_env' : 'unknown');
      }
      const data = (await response.json().catch(() => null)) as Record<string, unknown> | null;
      if (this.hooks.ended()) {
        const late = response.ok && data && isString(data.room_url) && isString(data.token) ? roomNameOf({ room_url: data.room_url, token: data.token }) : null;
        if (late) this.release(late, 'fetch');
        throw new CallFailure('cancelled');
      }
      this.httpStatus = response.status;
      if (response.ok) {
        this.hooks.answered();
        this.leaveQueue();
        if (!data || !isString(data.session_id) || !isString(data.room_url) || !isString(data.token)) throw new CallFailure('service_error');
        return data as unknown as SessionGrant;
      }
      const code = data && isString(data.error_code) ? data.error_code : '';
      if ((response.status === 429 && code === 'concurrency_limit') || (response.status === 503 && code === 'server_busy')) {
        await this.waitInQueue(response, data, code === 'server_busy' ? 'ojin' : 'backend');
        continue;
      }
      if (code === 'agent_not_found' || code === 'agent_unpublished' || response.status === 404) throw new CallFailure('agent_unavailable');
      if (code === 'auth_failed' || response.status === 403) throw new CallFailure('not_allowed');
      // The page's own settings (its attributes) were refused: the site's to fix, not the service's.
      if (response.status === 400) throw new CallFailure('invalid_settings');
      throw new CallFailure('service_error');
    }
  }

  /** Stops counting queue time (the call ended while queued, or a grant came). */
  leaveQueue(): void {
    if (this.queuedSince === null) return;
    this.queuedMs += performance.now() - this.queuedSince;
    this.queuedSince = null;
    this.hooks.queuing(false);
  }

  /** POST {endpoint}/v1/public/agents/connect/{room}: a beacon when the page is going away, else fetch with keepalive. */
  release(room: string, mode: 'fetch' | 'beacon'): void {
    const url = `${this.request.endpoint}/v1/public/agents/connect/${encodeURIComponent(room)}`;
    try {
      if (mode === 'beacon' && typeof navigator.sendBeacon === 'function' && navigator.sendBeacon(url)) return;
    } catch {
      // fall through to fetch
    }
    void fetch(url, { method: 'POST', keepalive: true, credentials: 'omit' }).catch(() => undefined);
  }

  private async waitInQueue(response: Response, data: Record<string, unknown> | null, domain: FaultDomain): Promise<void> {
    const now = performance.now();
    this.queuedSince ??= now;
    this.hooks.queuing(true);
    const header = Number(response.headers.get('retry-after'));
    const named = num(data?.retry_after_seconds) ?? (Number.isFinite(header) && header > 0 ? header : null);
    const { minRetryAfterS, maxRetryAfterS, defaultRetryAfterS } = SESSION_API_DEFAULTS;
    const waitS = Math.min(maxRetryAfterS, Math.max(minRetryAfterS, named ?? defaultRetryAfterS));
    if (now - this.queuedSince + waitS * 1000 > this.request.queueTimeoutMs) throw new CallFailure('queue_timeout', domain);
    const signal = this.hooks.signal;
    if (signal.aborted) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, waitS * 1000);
      signal.addEventListener('abort', done, { once: true });
    });
  }
}
