/**
 * What every connect goes through before and around its admission, whichever process admits it
 * (this process's bots: live-sessions.ts; a fleet of runners: server/fleet/fleet-sessions.ts): the
 * agent exists, is published, allows the page's origin and, with `auth_enabled`, got a valid
 * connect token; and the decision is timed (`svc_session_admission_decision_seconds`) and counted.
 */
import type { Agents } from '../services/agents.ts';
import { verifyConnectToken } from './connect-auth.ts';
import { checkOrigin } from './origin-allowlist.ts';
import { SessionError } from './session-errors.ts';

/** The fields of a connect that these checks read (live-sessions' `ConnectRequest`). */
export interface ConnectChecked {
  readonly agentId: string;
  readonly clientUserRef: string | null;
  readonly origin: string | undefined;
  readonly authToken: unknown;
}

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The agent row a connect may be admitted for, or the SessionError that refuses it. `lookup`
 * reads the row (default `agents.findById`); `afterLookup` runs once it is read (a process that
 * began shutting down meanwhile refuses there).
 */
export async function connectableAgent(
  agents: Pick<Agents, 'findById' | 'authSecretOf'>,
  request: ConnectChecked,
  lookup: (agentId: string) => ReturnType<Agents['findById']> = (id) => agents.findById(id),
  afterLookup?: () => void,
): Promise<NonNullable<Awaited<ReturnType<Agents['findById']>>>> {
  if (!UUID_RE.test(request.agentId)) throw new SessionError('agent_not_found', `agent ${request.agentId} not found`);
  const row = await lookup(request.agentId);
  afterLookup?.();
  if (!row) throw new SessionError('agent_not_found', `agent ${request.agentId} not found`);
  if (row.status !== 'published') throw new SessionError('agent_unpublished', `agent ${request.agentId} is not published`);
  const origin = checkOrigin(row.allowed_hostnames as string[] | null, request.origin);
  if (!origin.allowed) throw new SessionError('auth_failed', origin.reason);
  if (row.auth_enabled) {
    const secret = agents.authSecretOf(row);
    const problem = secret === null ? 'this agent has auth_enabled but no auth secret' : verifyConnectToken(secret, row.agent_id, request.authToken, request.clientUserRef, Date.now());
    if (problem) throw new SessionError('auth_failed', problem);
  }
  return row;
}

/** Connects started and refused (by error code), as `stats()` reports them. */
export interface ConnectCounts {
  started: number;
  readonly refused: Record<string, number>;
}

/**
 * Runs one connect: `admit` gets an `admitted()` to call the moment the admission decided (the
 * rest of its work, the bot's start, is not decision time). The decision is reported once to
 * `onDecision` (and `settled`), admitted or refused, and counted.
 */
export async function decidedConnect<T>(
  counts: ConnectCounts,
  onDecision: ((ms: number, outcome: 'admitted' | 'refused') => void) | undefined,
  admit: (admitted: () => void) => Promise<T>,
  settled?: () => void,
): Promise<T> {
  const arrived = performance.now();
  let decided = false;
  const decide = (outcome: 'admitted' | 'refused') => {
    if (decided) return;
    decided = true;
    settled?.();
    onDecision?.(performance.now() - arrived, outcome);
  };
  try {
    const grant = await admit(() => decide('admitted'));
    decide('admitted');
    counts.started++;
    return grant;
  } catch (err) {
    decide('refused');
    const code = err instanceof SessionError ? err.code : 'internal_error';
    counts.refused[code] = (counts.refused[code] ?? 0) + 1;
    throw err;
  }
}
