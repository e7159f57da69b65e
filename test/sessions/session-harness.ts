/**
 * A real server with the Session API as `npm start` assembles it (`buildServer`: embedded rooms,
 * the in-process BotRunner, offline engines, the human-portrait face), for the session tests.
 */
import { facePlugin } from '../../plugins/face/index.ts';
import { localPlugin } from '../../plugins/local/index.ts';
import { createCapacityGate, type CapacityGate } from '../../server/capacity/index.ts';
import type { MountedRooms, MountRoomsOptions } from '../../server/rooms/mount.ts';
import type { EmbeddedSessions, EmbeddedSessionsOptions } from '../../server/sessions/embedded-sessions.ts';
import type { Plugin } from '../../core/registry.ts';
import type { ServerInput } from '../../server/build-server.ts';
import { startTestServer, type Call, type TestServer } from '../server/harness.ts';
import { until } from '../../testing/until.ts';

export interface SessionTestServer extends TestServer {
  rooms: MountedRooms;
  live: EmbeddedSessions;
  /** A published agent (allowed_hostnames `*` unless given) with these fields; returns its id. */
  agent(fields?: Record<string, unknown>, options?: { publish?: boolean }): Promise<string>;
  connect(body: unknown, headers?: Record<string, string>): Promise<Call>;
  release(room: string, init?: { body?: string; headers?: Record<string, string> }): Promise<Call>;
  /** The call record of a session (through the REST API). */
  callOf(agentId: string, sessionId: string): Promise<any>;
  /** The call record of a session once it has ended (no longer `active`); fails after `ms`. */
  endedCallOf(agentId: string, sessionId: string, ms?: number): Promise<any>;
}

export async function startSessionServer(
  label: string,
  options: { sessions?: EmbeddedSessionsOptions; rooms?: MountRoomsOptions; pglite?: boolean; config?: Partial<ServerInput>; plugins?: Plugin[] } = {},
): Promise<SessionTestServer> {
  // A roomy gate by slots only: several of these tests hold sessions at once, and a loaded test
  // machine's late frames would refuse one (server_busy) at random; the late-frame rule has its own
  // tests (test/server/capacity-gate, operations-overload, sessions/multi-process, sessions/rest-flood,
  // which run the default gate). A test's own `sessions.capacity` wins.
  const gate: CapacityGate = createCapacityGate({ limit: 64, loadCheck: false });
  const ts = await startTestServer({
    label,
    plugins: [localPlugin, facePlugin, ...(options.plugins ?? [])],
    ...(options.pglite === undefined ? {} : { pglite: options.pglite }),
    ...(options.config ? { config: options.config } : {}),
    surfaces: { sessions: true, rooms: true },
    parts: { capacity: gate, rooms: options.rooms ?? {}, sessions: { shutdownTimeoutMs: 5_000, ...options.sessions } },
  });
  const rooms = ts.server.rooms!;
  const live = ts.server.sessions!;
  const stop = ts.stop.bind(ts);
  const parse = async (res: Response): Promise<Call> => {
    const text = await res.text();
    let body: any;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      body = undefined;
    }
    return { status: res.status, headers: res.headers, body, text };
  };
  return Object.assign(ts, {
    rooms,
    live,
    async agent(fields: Record<string, unknown> = {}, o: { publish?: boolean } = {}) {
      const created = await ts.call('POST', '/v1/agents', { body: { title: `agent ${Math.random().toString(36).slice(2)}` } });
      if (created.status !== 201) throw new Error(created.text);
      const id = created.body.agent_id as string;
      const patched = await ts.call('PATCH', `/v1/agents/${id}`, { body: { allowed_hostnames: ['*'], ...fields } });
      if (patched.status !== 200) throw new Error(patched.text);
      if (o.publish !== false) await ts.call('PATCH', `/v1/agents/${id}/status`, { body: { status: 'published' } });
      return id;
    },
    async connect(body: unknown, headers: Record<string, string> = {}) {
      const raw = typeof body === 'string' ? body : JSON.stringify(body);
      return parse(await fetch(`${ts.url}/v1/public/agents/connect`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: raw }));
    },
    async release(room: string, init: { body?: string; headers?: Record<string, string> } = {}) {
      return parse(await fetch(`${ts.url}/v1/public/agents/connect/${encodeURIComponent(room)}`, { method: 'POST', headers: init.headers ?? {}, ...(init.body === undefined ? {} : { body: init.body }) }));
    },
    async callOf(agentId: string, sessionId: string) {
      const calls = await ts.call('GET', `/v1/agents/${agentId}/calls?limit=100`);
      return (calls.body.data as any[]).find((c) => c.session_id === sessionId);
    },
    async endedCallOf(agentId: string, sessionId: string, ms = 10_000) {
      return until(async () => {
        const c = await this.callOf(agentId, sessionId);
        return c?.status !== 'active' && c;
      }, { timeoutMs: ms, intervalMs: 50, what: `the ended call record of session ${sessionId}` });
    },
    async stop() {
      await stop();
      gate.close();
    },
  });
}

export const roomOf = (roomUrl: string): string => new URL(roomUrl).searchParams.get('room')!;
