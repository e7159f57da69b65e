/**
 * The ceiling bench/api.ts measures our REST server against: a bare `node:http` server with a
 * `pg` pool of the same size, answering `GET /v1/agents/:id` with the same keyed SELECT (the
 * agent and its tools, as a named prepared statement) as JSON. No framework, no validation, no
 * log line, no API-key check unless `authenticate` is given (then the server's own cached lookup,
 * to price that step alone).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { DATABASE_DEFAULTS } from '../server/db/connect.ts';

const GET_SQL = `select a.*, coalesce((select json_agg(t order by t.position) from agent_tools t where t.agent_id = a.agent_id), '[]'::json) as tool_rows
  from agents a where a.agent_id = $1 and a.organization_id = $2`;

export interface CeilingServer {
  readonly url: string;
  close(): Promise<void>;
}

export async function startCeilingServer(databaseUrl: string, organizationId: string, authenticate?: (key: string) => Promise<unknown>): Promise<CeilingServer> {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: DATABASE_DEFAULTS.poolMax });
  const answer = (res: import('node:http').ServerResponse, status: number, body: string) => {
    res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(body) });
    res.end(body);
  };
  const server: Server = createServer((req, res) => {
    const m = /^\/v1\/agents\/([0-9a-f-]{36})$/.exec(req.url ?? '');
    if (req.method !== 'GET' || !m) return answer(res, 404, '{"code":"route_not_found"}');
    void (async () => {
      if (authenticate && !(await authenticate(String(req.headers['x-api-key'] ?? '')))) return answer(res, 401, '{"code":"unauthorized"}');
      const { rows } = await pool.query({ name: 'agents.get', text: GET_SQL, values: [m[1], organizationId] });
      if (!rows[0]) return answer(res, 404, '{"code":"agent_not_found"}');
      answer(res, 200, JSON.stringify(rows[0]));
    })().catch(() => answer(res, 500, '{"code":"internal_error"}'));
  });
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async close() {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await pool.end();
    },
  };
}
