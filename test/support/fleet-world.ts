/**
 * A fleet across hosts for the fleet tests and bench (issue 26, docs/deployment.md): network
 * namespaces (test/support/netns.ts) on one segment, API hosts running `server/main.ts` with
 * SVC_SESSIONS=fleet (what `npm start` runs) and runner hosts running `server/runner.ts`
 * (`npm run runner`). Every process is bound to its namespace's address, so an accidental
 * loopback shortcut fails. PostgreSQL (on the machine's loopback) is reached from the namespaces
 * through a TCP relay the test process runs on its root link; object storage is one shared folder
 * (the namespaces share the file system).
 *
 * The test process is the visitors' machine: its connects and its headless libwebrtc visitors
 * (test/agent/room-visitor.ts) stay in the root namespace and reach the hosts through the root
 * link (a visitor of its own namespace would only add a process per visitor on two cores).
 *
 * `close()` leaves nothing: every process of the network killed by process group, the
 * namespaces, the relay, the test database and every folder made here removed. Call it from
 * `test.after.always`. Needs root and iproute2 (`available()`).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { until } from '../../testing/until.ts';
import { RoomVisitor } from '../agent/room-visitor.ts';
import { createTestDatabase } from '../server/harness.ts';
import { TcpRelay } from '../server/operations-relay.ts';
import { canMakeTestHosts, TestNetwork, type Host, type Segment } from './netns.ts';
import type { GroupProcess } from './process-group.ts';

export const FLEET_SECRET = 'fleet-test-runner-secret-0123456789';
export const RUNNER_PORT = 8090;
export const API_PORT = 8080;

export interface FleetRunner {
  readonly name: string;
  readonly host: Host;
  readonly url: string;
  proc: GroupProcess;
}

export interface FleetApi {
  readonly name: string;
  readonly host: Host;
  readonly url: string;
  readonly proc: GroupProcess;
}

export interface Session {
  readonly session_id: string;
  readonly room_url: string;
  readonly token: string;
}

export interface FleetWorldOptions {
  /** Names the test database and the folders. */
  readonly label: string;
  /** API processes (default 1). */
  readonly apis?: number;
  /** Runners by name, each with extra environment (default r1 and r2, nothing extra). */
  readonly runners?: Readonly<Record<string, Readonly<Record<string, string>>>>;
  /** Slots of each runner (default 4). */
  readonly slots?: number;
  /** Extra environment of the API processes. */
  readonly apiEnv?: Readonly<Record<string, string>>;
  /** The agent's max_concurrency (default 20). */
  readonly maxConcurrency?: number;
}

export const available = canMakeTestHosts;

export class FleetWorld {
  readonly runners = new Map<string, FleetRunner>();
  readonly apis: FleetApi[] = [];
  /** Rooms of sessions started and not yet released by `release` (released by `releaseAll`). */
  readonly started = new Set<string>();
  readonly visitors: RoomVisitor[] = [];
  key = '';
  agentId = '';
  private readonly cleanups: (() => Promise<unknown> | unknown)[] = [];
  private closed = false;

  private constructor(
    readonly network: TestNetwork,
    readonly segment: Segment,
    readonly rootAddress: string,
    readonly db: pg.Client,
    readonly databaseUrl: string,
    /** What every process of the fleet gets (database through the relay, storage, secrets). */
    readonly env: Readonly<Record<string, string>>,
    readonly slots: number,
  ) {}

  static async create(options: FleetWorldOptions): Promise<FleetWorld> {
    const cleanups: (() => Promise<unknown> | unknown)[] = [];
    try {
      const network = await TestNetwork.create();
      cleanups.push(() => network.close());
      const segment = await network.segment('dc');
      const rootAddress = await network.rootLink(segment);
      const database = await createTestDatabase(options.label);
      cleanups.push(() => database.drop());
      const relay = TcpRelay.to(database.url, rootAddress);
      await relay.start();
      cleanups.push(() => relay.stop());
      const storage = mkdtempSync(join(tmpdir(), `svc-${options.label}-objects-`));
      cleanups.push(() => rmSync(storage, { recursive: true, force: true }));
      const db = new pg.Client({ connectionString: database.url });
      await db.connect();
      cleanups.push(() => db.end());
      const env = {
        DATABASE_URL: relay.via(database.url), STORAGE_ROOT: storage,
        SVC_ENCRYPTION_KEY: 'fleet-test-encryption', SVC_SIGNING_SECRET: 'fleet-test-signing', SVC_RUNNER_SECRET: FLEET_SECRET,
        // Visitors' candidates on the test segment are private addresses: allowed, as an operator allows its LAN.
        SVC_ICE_ALLOWED_RANGES: `${segment.prefix}.0/24`, SVC_WORKER: 'off', LOG_LEVEL: 'warn',
      };
      const world = new FleetWorld(network, segment, rootAddress, db, database.url, env, options.slots ?? 4);
      // Processes first (the network), then the relay, the client, the database, the folders.
      const [closeNetwork, dropDatabase, stopRelay, removeStorage, endClient] = cleanups as [() => unknown, () => unknown, () => unknown, () => unknown, () => unknown];
      world.cleanups.push(closeNetwork, stopRelay, endClient, dropDatabase, removeStorage);
      cleanups.length = 0;
      try {
        for (let i = 0; i < (options.apis ?? 1); i++) await world.startApi(`api${i + 1}`, options.apiEnv ?? {});
        // One runner after the other: each migrates the (already migrated) database at start.
        for (const [name, extra] of Object.entries(options.runners ?? { r1: {}, r2: {} })) await world.startRunner(name, extra);
        await world.makeAgent(options.maxConcurrency ?? 20);
      } catch (err) {
        await world.close();
        throw err;
      }
      return world;
    } catch (err) {
      for (const cleanup of cleanups.reverse()) await Promise.resolve().then(cleanup).catch(() => undefined);
      throw err;
    }
  }

  /** A data directory removed when the world closes (after the processes using it). */
  scratchDir(prefix: string): string {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    this.cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    return dir;
  }

  /** An API process (`npm start`, SVC_SESSIONS=fleet) on a host of its own, once it listens. */
  async startApi(name: string, extra: Readonly<Record<string, string>> = {}): Promise<FleetApi> {
    const host = await this.network.host(name, { links: [{ segment: this.segment }] });
    const first = this.apis.length === 0;
    const listening = (output: string) => /svc server listening on (http:\/\/\S+)/.exec(output)?.[1];
    const started = this.network.spawnEntryPoint(
      host, 'server/main.ts',
      { ...this.env, SVC_SESSIONS: 'fleet', HOST: host.address, PORT: String(API_PORT), SVC_RUNNER_START_TIMEOUT_MS: '5000', SVC_DATA_DIR: this.scratchDir(`svc-fleet-${name}-`), ...extra },
      // The first start on the database prints the demo key last; later ones end with the Health line.
      (output) => listening(output) !== undefined && output.includes(first ? 'Try: curl' : '  Health:') && /\n\s*$/.test(output),
      `fleet API process ${name}`,
    );
    await started.ready;
    if (first) this.key = /^\s+(svc_\S+)\s*$/m.exec(started.process.output)![1]!;
    const api = { name, host, url: listening(started.process.output)!, proc: started.process };
    this.apis.push(api);
    return api;
  }

  /** The runner `name` (`npm run runner`, `slots` slots) on its host (made the first time, or `host`), until it says ready. */
  async startRunner(name: string, extra: Readonly<Record<string, string>> = {}, onHost?: Host): Promise<FleetRunner> {
    const host = onHost ?? this.runners.get(name)?.host ?? (await this.network.host(name, { links: [{ segment: this.segment }] }));
    const url = `http://${host.address}:${RUNNER_PORT}`;
    const started = this.network.spawnEntryPoint(
      host, 'server/runner.ts',
      { ...this.env, HOST: host.address, PORT: String(RUNNER_PORT), SVC_RUNNER_PUBLIC_URL: url, SVC_RUNNER_SLOTS: String(this.slots), SVC_RUNNER_ID: name, SVC_DATA_DIR: this.scratchDir(`svc-fleet-${name}-`), ...extra },
      (output) => output.includes('svc runner ready'),
      `runner ${name}`,
    );
    await started.ready;
    const runner = { name, host, url, proc: started.process };
    this.runners.set(name, runner);
    return runner;
  }

  /** REST through API process `api` (default the first) with the demo key. */
  async call(method: string, path: string, body?: unknown, api = 0): Promise<{ status: number; body: any }> {
    const res = await fetch(`${this.apis[api]!.url}${path}`, { method, headers: { 'x-api-key': this.key, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    return { status: res.status, body: (await res.json()) as any };
  }

  /**
   * A published agent admitting any origin, with small faces by default (eight live bots on two
   * shared cores); `maxVideoDimension` null: the face's own 640x360.
   */
  async makeAgent(maxConcurrency: number, maxVideoDimension: number | null = 160): Promise<string> {
    const agentId = (await this.call('POST', '/v1/agents', { title: 'fleet agent' })).body.agent_id as string;
    await this.call('PATCH', `/v1/agents/${agentId}`, { allowed_hostnames: ['*'], max_concurrency: maxConcurrency, ...(maxVideoDimension ? { advanced: { max_video_source_dimension: maxVideoDimension } } : {}) });
    await this.call('PATCH', `/v1/agents/${agentId}/status`, { status: 'published' });
    this.agentId ||= agentId;
    return agentId;
  }

  /** A visitor's connect through API process `api` (default the first). */
  async connect(api = 0, agentId = this.agentId): Promise<{ status: number; body: any; ms: number }> {
    const startedAt = performance.now();
    const res = await fetch(`${this.apis[api]!.url}/v1/public/agents/connect`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ agent_id: agentId }) });
    const body = (await res.json()) as any;
    if (res.status === 200) this.started.add(body.room_url);
    return { status: res.status, body, ms: performance.now() - startedAt };
  }

  /** Releases a session through API process `api` (default the first); the number released. */
  async release(roomUrl: string, api = 0): Promise<number> {
    const room = new URL(roomUrl).searchParams.get('room')!;
    const res = await fetch(`${this.apis[api]!.url}/v1/public/agents/connect/${room}`, { method: 'POST' });
    this.started.delete(roomUrl);
    return ((await res.json()) as { released: number }).released;
  }

  /** Releases what the case started (through a live API process) and waits until no session is left. */
  async releaseAll(): Promise<void> {
    const api = this.apis.findIndex((a) => a.proc.child.exitCode === null && a.proc.child.signalCode === null);
    for (const url of [...this.started]) await this.release(url, Math.max(0, api)).catch(() => 0);
    this.started.clear();
    for (const v of this.visitors.splice(0)) v.close();
    await until(async () => (await this.sessionCount()) === 0, { timeoutMs: 30_000, what: 'the case\'s sessions to end' }).catch(() => undefined);
  }

  async sessionCount(): Promise<number> {
    return (await this.db.query('select count(*)::int as n from agent_sessions')).rows[0].n as number;
  }

  /** Placed sessions (live leases) per runner, from the database. */
  async placedByRunner(): Promise<Record<string, number>> {
    const rows = (await this.db.query(`select runner_id, count(*)::int as n from agent_sessions where lease_expires_at > now() group by runner_id order by runner_id`)).rows as { runner_id: string; n: number }[];
    return Object.fromEntries(rows.map((r) => [r.runner_id, r.n]));
  }

  /** The runner a Session's room_url points at (its host's address), or undefined. */
  runnerOf(roomUrl: string): FleetRunner | undefined {
    const host = new URL(roomUrl).hostname;
    return [...this.runners.values()].find((r) => r.host.address === host);
  }

  async callOf(sessionId: string): Promise<any> {
    return (await this.db.query('select status, termination_reason, failure_reason, ended_at, started_at, metadata from agent_calls where session_id = $1', [sessionId])).rows[0];
  }

  /** The call of `sessionId` once it has ended (within `timeoutMs`). */
  async endedCall(sessionId: string, timeoutMs: number): Promise<any> {
    return until(async () => {
      const row = await this.callOf(sessionId);
      return row?.ended_at ? row : undefined;
    }, { timeoutMs, what: `the call of ${sessionId} to be recorded` });
  }

  /** A visitor joined to a Session's room (closed by `releaseAll` and `close`). */
  async visit(session: Session): Promise<RoomVisitor> {
    const visitor = await RoomVisitor.join(session.room_url, session.token);
    this.visitors.push(visitor);
    return visitor;
  }

  /** Kills everything and removes everything made for the world; safe to call twice. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const v of this.visitors.splice(0)) v.close();
    for (const cleanup of this.cleanups) await Promise.resolve().then(cleanup).catch(() => undefined);
  }
}

/** Lines of `output` matching `pattern` (a process's log). */
export function countLines(output: string, pattern: RegExp): number {
  return output.split('\n').filter((l) => pattern.test(l)).length;
}
