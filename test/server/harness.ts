import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { Registry, type Plugin } from '../../core/registry.ts';
import { buildServer, type AppServer, type ServerInput, type ServerParts } from '../../server/build-server.ts';
import { REST_ONLY, type Surfaces } from '../../server/config/surfaces.ts';
import { seedPgliteDir } from '../support/pglite-template.ts';

export const POSTGRES_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** Catalogue descriptors of a test face plugin (our own plugin API, registered for real). */
export const TEST_VARIANTS = [
  {
    model_variant_id: 'svc/test-portrait/v1', model_id: 'svc/test-portrait', title: 'Test Portrait v1',
    description: { en: 'test', frame_rate: '25', max_resolution: '1280x720' },
    configuration_schema: {
      type: 'object', additionalProperties: false,
      properties: {
        reference_image_asset_id: { type: 'string' },
        width: { type: 'integer', minimum: 128, maximum: 1280 },
        preview: { type: ['string', 'object', 'null'] },
      },
    },
    status: 'public', tags: ['portrait', 'realtime'], preview_media_url: null,
  },
  {
    model_variant_id: 'svc/test-presence/v1', model_id: 'svc/test-presence', title: 'Test Presence v1',
    description: { en: 'test presence' }, configuration_schema: { type: 'object' },
    status: 'public', tags: ['expressive', 'realtime'], preview_media_url: 'https://example.com/p.mp4',
  },
  {
    model_variant_id: 'svc/test-internal/v0', model_id: 'svc/test-portrait', title: 'Internal v0',
    description: {}, configuration_schema: {}, status: 'available', tags: ['portrait'], preview_media_url: null,
  },
] as const;

export const testFacePlugin: Plugin = {
  name: 'test-face',
  register(registry) {
    for (const d of TEST_VARIANTS) registry.register('face', d.model_id.split('/')[1]! + d.model_variant_id.split('/')[2], () => ({}), { label: d.title, descriptor: { ...d } });
  },
};

/** A database of its own per test file, so files run in parallel without clashing. */
export async function createTestDatabase(label: string): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `svc_${label.replace(/[^a-z0-9]/gi, '_').toLowerCase()}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: POSTGRES_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(POSTGRES_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: POSTGRES_URL });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

export interface Call {
  status: number;
  headers: Headers;
  body: any;
  text: string;
}

export interface TestServer {
  server: AppServer;
  url: string;
  keyA: string;
  keyB: string;
  dataDir: string;
  databaseUrl?: string;
  call(method: string, path: string, options?: { key?: string | null; body?: unknown; raw?: string | Buffer; headers?: Record<string, string> }): Promise<Call>;
  restart(): Promise<TestServer>;
  stop(): Promise<void>;
}

export interface TestServerOptions {
  label: string;
  /** Use PGlite in the data dir instead of PostgreSQL. */
  pglite?: boolean;
  plugins?: Plugin[];
  config?: Partial<ServerInput>;
  /** What the server serves besides REST (default: REST only); the same builder as `npm start`. */
  surfaces?: Partial<Surfaces>;
  /** The builder's parts (capacity gate, session options, ...); `registry` comes from `plugins`. */
  parts?: Omit<ServerParts, 'registry'>;
}

export const SECRETS = { encryptionKey: 'test-encryption-key', signingSecret: 'test-signing-secret' };

export async function startTestServer(options: TestServerOptions): Promise<TestServer> {
  const dataDir = mkdtempSync(join(tmpdir(), `svc-${options.label}-`));
  // SVC_TEST_DATABASE=pglite runs the whole suite on the embedded database instead.
  const pglite = options.pglite ?? process.env.SVC_TEST_DATABASE === 'pglite';
  const database = pglite ? undefined : await createTestDatabase(options.label);
  if (pglite) await seedPgliteDir(join(dataDir, 'pglite')); // an empty database without initdb's seconds
  const boot = async (keys?: { keyA: string; keyB: string }): Promise<TestServer> => {
    const registry = new Registry();
    for (const plugin of [testFacePlugin, ...(options.plugins ?? [])]) registry.use(plugin);
    const server = await buildServer(
      { ...SECRETS, port: 0, host: '127.0.0.1', logLevel: 'silent', dataDir, databaseUrl: database?.url, ...options.config, surfaces: { ...REST_ONLY, ...options.surfaces } },
      { ...options.parts, registry },
    );
    const { url } = await server.listen();
    const keyA = keys?.keyA ?? (await server.services.apiKeys.create('org-a', 'test')).key;
    const keyB = keys?.keyB ?? (await server.services.apiKeys.create('org-b', 'test')).key;
    const handle: TestServer = {
      server, url, keyA, keyB, dataDir, databaseUrl: database?.url,
      async call(method, path, o = {}) {
        const headers: Record<string, string> = { ...(o.headers ?? {}) };
        const key = o.key === undefined ? keyA : o.key;
        if (key) headers['x-api-key'] = key;
        let body: string | Buffer | undefined;
        if (o.raw !== undefined) body = o.raw;
        else if (o.body !== undefined) {
          body = JSON.stringify(o.body);
          headers['content-type'] ??= 'application/json';
        }
        const res = await fetch(`${url}${path}`, { method, headers, body: body as BodyInit | undefined });
        const text = await res.text();
        let parsed: any;
        try {
          parsed = text ? JSON.parse(text) : undefined;
        } catch {
          parsed = undefined;
        }
        return { status: res.status, headers: res.headers, body: parsed, text };
      },
      async restart() {
        await server.close();
        return boot({ keyA, keyB });
      },
      async stop() {
        await server.close();
        await database?.drop();
        rmSync(dataDir, { recursive: true, force: true });
      },
    };
    return handle;
  };
  return boot();
}

/** Asserts the spec error body: `{ code, message, details? }` and nothing else. */
export function isErrorBody(body: any): boolean {
  if (!body || typeof body.code !== 'string' || typeof body.message !== 'string') return false;
  return Object.keys(body).every((k) => ['code', 'message', 'details'].includes(k));
}
