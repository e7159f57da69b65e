import type { Db } from './connect.ts';
import { HeldConnections, type Held, type KnexPgClient } from './held-connections.ts';

/** `?` placeholders rewritten as `$1, $2, ...`, by SQL text (a handful of fixed statements). */
const pgText = new Map<string, string>();

function toPgText(sql: string): string {
  let text = pgText.get(sql);
  if (text === undefined) {
    let n = 0;
    text = sql.replace(/\?/g, () => `$${++n}`);
    pgText.set(sql, text);
  }
  return text;
}

/**
 * Runs a hot, fixed query as a named prepared statement on PostgreSQL (parsed and planned once
 * per connection: about twice the throughput of an ad-hoc query), or as a plain query on
 * PGlite. `sql` uses `?` placeholders in order; it must not contain `?` anywhere else.
 *
 * On PostgreSQL the statement runs on one of the connections held out of knex's pool for these
 * statements (held-connections.ts: no pool acquire and release per query); when all of those are
 * busy it waits for the next one to come free, first come first served, at most knex's
 * `acquireConnectionTimeout` (then knex's `KnexTimeoutError`). Without held connections (a pool of
 * one, a destroyed pool) it takes a connection from knex's pool as any query does.
 */
export function preparedQuery(db: Db, name: string, sql: string, values: unknown[]): Promise<any[]> {
  const client = db.client as unknown as KnexPgClient;
  if (client.config.client !== 'pg') return db.raw(sql, values as never[]).then((r: { rows: any[] }) => r.rows);
  const text = toPgText(sql);
  const held = HeldConnections.of(db);
  const taken = held?.take();
  if (taken === undefined) return throughPool(client, name, text, values);
  if (taken instanceof Promise) return taken.then((h) => onHeld(held!, h, name, text, values));
  return onHeld(held!, taken, name, text, values);
}

function onHeld(held: HeldConnections, h: Held, name: string, text: string, values: unknown[]): Promise<any[]> {
  return h.connection.query({ name, text, values }).then(
    (result) => {
      held.put(h, false);
      return result.rows;
    },
    (err: unknown) => {
      held.put(h, true);
      throw err;
    },
  );
}

async function throughPool(client: KnexPgClient, name: string, text: string, values: unknown[]): Promise<any[]> {
  const connection = await client.acquireConnection();
  try {
    return (await connection.query({ name, text, values })).rows;
  } finally {
    await client.releaseConnection(connection);
  }
}
