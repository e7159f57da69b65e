/**
 * The HTTP between API processes and runners (docs/deployment.md, "Between the roles"). Both
 * sides are this codebase, of one version; nothing here is a public API.
 *
 * - `POST {runner}/internal/runner/v1/sessions/{session_id}/start`: start the bot of a session
 *   placed on this runner. No body: the runner reads the session (agent, room, limit) from the
 *   database and decrypts a third-party key itself, so neither the agent's data nor a provider key
 *   crosses the network. Answers 200 `{room_url, token}`; 503 `{error_code: runner_draining |
 *   runner_starting | runner_full}` (try another runner); 409 `not_placed_here`; 502
 *   `bot_start_failed` or `room_creation_failed` (the runner claimed the session, could not start
 *   its bot or create its room, and recorded the call).
 * - `POST {runner}/internal/runner/v1/sessions/{session_id}/release`: the session's release was
 *   requested in the database; look now instead of at the next heartbeat. 200 `{}` whatever.
 *
 * Every request carries `Authorization: Bearer <SVC_RUNNER_SECRET>`; without it, or with another
 * secret, 401 `unauthorized` (compared in constant time; the refusal is logged without the secret).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { FLEET } from './fleet-store.ts';

export const RUNNER_PATHS = {
  start: '/internal/runner/v1/sessions/:session_id/start',
  release: '/internal/runner/v1/sessions/:session_id/release',
} as const;

export type RunnerRefusalCode = 'runner_draining' | 'runner_starting' | 'runner_full' | 'not_placed_here' | 'unauthorized';

export type StartAnswer =
  | { readonly ok: true; readonly roomUrl: string; readonly token: string }
  /** The runner said no (full, draining, not placed there): try the next one. */
  | { readonly ok: false; readonly kind: 'refused'; readonly code: string }
  /** No answer within the deadline, a network error, or an answer that is not the protocol's. */
  | { readonly ok: false; readonly kind: 'unreachable'; readonly detail: string }
  /** The runner claimed the session and could not start its bot; it recorded the call. */
  | { readonly ok: false; readonly kind: 'failed'; readonly code: string };

/** Whether `given` (an Authorization header) carries `secret`, in constant time whatever the lengths. */
export function bearerMatches(given: string | undefined, secret: string): 'ok' | 'missing' | 'wrong' {
  const match = /^Bearer (.+)$/.exec(given ?? '');
  if (!match) return 'missing';
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(match[1]!), digest(secret)) ? 'ok' : 'wrong';
}

function endpoint(runnerUrl: string, path: string, sessionId: string): URL {
  const base = new URL(runnerUrl);
  return new URL(path.replace(':session_id', encodeURIComponent(sessionId)), base);
}

/** Asks a runner to start a placed session's bot, within `timeoutMs`. Never throws. */
export async function requestStart(runnerUrl: string, secret: string, sessionId: string, timeoutMs: number = FLEET.startTimeoutMs): Promise<StartAnswer> {
  let res: Response;
  let body: Record<string, unknown>;
  try {
    res = await fetch(endpoint(runnerUrl, RUNNER_PATHS.start, sessionId), {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}` },
      signal: AbortSignal.timeout(timeoutMs),
    });
    body = (await res.json()) as Record<string, unknown>;
  } catch (err) {
    return { ok: false, kind: 'unreachable', detail: (err as Error).name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : (err as Error).message };
  }
  if (res.status === 200 && typeof body?.room_url === 'string' && typeof body.token === 'string') return { ok: true, roomUrl: body.room_url, token: body.token };
  const code = typeof body?.error_code === 'string' ? body.error_code : `http_${res.status}`;
  if (res.status === 502) return { ok: false, kind: 'failed', code };
  if (res.status === 503 || res.status === 409) return { ok: false, kind: 'refused', code };
  // 401 (the secrets differ: a deployment error, said loudly by the caller's log) and anything else.
  return { ok: false, kind: 'unreachable', detail: `answered ${res.status} ${code}` };
}

/** Tells a runner a release waits for one of its sessions (best effort; never throws). */
export async function nudgeRelease(runnerUrl: string, secret: string, sessionId: string): Promise<boolean> {
  try {
    const res = await fetch(endpoint(runnerUrl, RUNNER_PATHS.release, sessionId), {
      method: 'POST',
      headers: { authorization: `Bearer ${secret}` },
      signal: AbortSignal.timeout(FLEET.releaseNudgeTimeoutMs),
    });
    await res.arrayBuffer();
    return res.ok;
  } catch {
    return false;
  }
}
