import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { describeDatabase } from '../config/env.ts';
import type { Db } from '../db/connect.ts';

const DATABASE_NOTE = `Database: DATABASE_URL (PostgreSQL) when set, else the embedded database in
$SVC_DATA_DIR/pglite (SVC_DATA_DIR defaults to .data, relative to the current folder). Every command
says which database it uses (on stderr). An embedded database is never created silently: when
there is none at that place (usually a different SVC_DATA_DIR or folder than the server's), the
command stops; pass --create to create a new, empty one there. While \`npm start\` runs on the
embedded database, commands go through the server's local socket ($SVC_DATA_DIR/pglite/run).`;

const USAGE = `usage: svc <command> [options]

  svc keys create --org NAME --name LABEL [--json] [--create]   create a key (printed once)
  svc keys list --org NAME [--json]                              list keys (prefix only)
  svc keys revoke ID                                             revoke a key
  svc runners list [--json]                                      the fleet's runners (docs/deployment.md)
  svc help [command], svc <command> --help                       help

${DATABASE_NOTE}`;

const HELP: Record<string, string> = {
  keys: `usage: svc keys <create|list|revoke> [options]

  create --org NAME --name LABEL [--json] [--create]   create an API key for organization NAME
  list --org NAME [--json]                             list the organization's keys (prefix only)
  revoke ID                                            revoke the key with id ID

svc keys <command> --help for one command.

${DATABASE_NOTE}`,
  'keys create': `usage: svc keys create --org NAME --name LABEL [--json] [--create]

Creates an API key for organization NAME (created if new) labelled LABEL and prints it once:
store it, it cannot be shown again. --json prints {api_key_id, key, prefix, name, organization, ...}.
--create: create the embedded database if there is none (see below).

${DATABASE_NOTE}`,
  'keys list': `usage: svc keys list --org NAME [--json]

Lists the keys of organization NAME: id, prefix, label, creation and revocation dates (never the key).

${DATABASE_NOTE}`,
  runners: `usage: svc runners list [--json]

Lists the fleet's runners (npm run runner) as the registry has them: id, state (starting, ready,
draining), whether placement may choose it now (ready, a heartbeat younger than 5 s, a
well-formed row, its load under its bound; if not, why), the sessions placed on it of its slots,
what it last reported (live sessions, CPU share, late face frames, event-loop lag) and its
heartbeat's age. A runner that died keeps its row (heartbeat ageing, not placeable) until it comes
back under the same id, or for an hour (then any API process or runner removes it); one that
stopped cleanly removed it.

${DATABASE_NOTE}`,
  'keys revoke': `usage: svc keys revoke ID

Revokes the key with id ID (a UUID, as printed by create and list). A running server stops
accepting it within its key cache time (about a second); /realtime sessions of that key end
within 10 s. Exit status 1 when there was no active key with that id.

${DATABASE_NOTE}`,
};

const OPTIONS = {
  org: { type: 'string' },
  name: { type: 'string' },
  json: { type: 'boolean' },
  create: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

const QUIET = { warn: () => undefined, error: () => undefined, debug: () => undefined };

/** True when `dir` holds an embedded (PGlite) database: PostgreSQL's data folder marker. */
export function embeddedDatabaseExists(dir: string): boolean {
  return existsSync(join(dir, 'PG_VERSION'));
}

/**
 * The CLI standing in for the dashboard's API Keys section. Returns the exit code: 0 done,
 * 1 refused or failed (the reason printed), 2 bad usage (the usage printed).
 * `out` receives the results (stdout), `note` what the CLI tells about itself (stderr).
 */
export async function runCli(
  argv: string[],
  out: (line: string) => void = console.log,
  /** The environment to read the database's location from (config/env.ts); default: this process's. */
  env?: Readonly<Record<string, string | undefined>>,
  note: (line: string) => void = (line) => process.stderr.write(line + '\n'),
): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({ args: argv, allowPositionals: true, options: OPTIONS });
  } catch (err) {
    out(`svc: ${(err as Error).message.replace(/\. To specify a positional argument.*$/s, '')}`);
    out(`\n${USAGE}`);
    return 2;
  }
  const { positionals, values } = parsed;
  if (positionals[0] === 'help') {
    const topic = positionals.slice(1, 3).join(' ');
    out(HELP[topic] ?? USAGE);
    return topic && !HELP[topic] ? 2 : 0;
  }
  const [group, command, arg] = positionals;
  if (values.help) {
    const topic = [group, command].filter(Boolean).join(' ');
    if (!topic) {
      out(USAGE);
      return 0;
    }
    if (HELP[topic]) {
      out(HELP[topic]);
      return 0;
    }
    out(`svc: no command "${topic}"\n\n${USAGE}`);
    return 2;
  }
  if (group !== 'keys' && group !== 'runners') {
    out(group ? `svc: no command "${group}"\n\n${USAGE}` : USAGE);
    return 2;
  }
  if (group === 'runners' && command !== 'list') {
    out(command ? `svc: no command "runners ${command}"\n\n${HELP.runners}` : HELP.runners!);
    return 2;
  }
  if (group === 'keys' && !command) {
    out(HELP.keys!);
    return 2;
  }
  if (group === 'keys' && !['create', 'list', 'revoke'].includes(command!)) {
    out(`svc: no command "keys ${command}"\n\n${HELP.keys}`);
    return 2;
  }
  const problem =
    group === 'runners' ? null
    : command === 'create' && (!values.org || !values.name) ? 'keys create needs --org NAME and --name LABEL'
    : command === 'list' && !values.org ? 'keys list needs --org NAME'
    : command === 'revoke' && (!arg || !/^[0-9a-f-]{36}$/i.test(arg)) ? 'keys revoke needs a key id (a UUID, from svc keys list)'
    : null;
  if (problem) {
    out(`svc: ${problem}\n\n${HELP[`keys ${command}`]}`);
    return 2;
  }

  const where = describeDatabase(env);
  note(`svc: using the ${where.label}`);
  if (!where.databaseUrl && !embeddedDatabaseExists(where.pgliteDir)) {
    if (!values.create) {
      out(
        `svc: there is no embedded database in ${where.pgliteDir}. The server you run may use another ` +
          `SVC_DATA_DIR (or folder) or DATABASE_URL: set the same here. To create a new, empty database there, add --create.`,
      );
      return 1;
    }
    note(`svc: creating a new embedded database in ${where.pgliteDir}`);
  }
  // The database's modules (knex, PGlite, the stores) load only for a command that opens it: help
  // and usage errors answer without them, at once.
  const [{ closeDatabase, openDatabase, openEmbeddedClient }, { migrateToLatest }, { ApiKeys }, { FleetStore }, { SESSION_LEASE }] = await Promise.all([
    import('../db/connect.ts'),
    import('../db/migrate.ts'),
    import('../services/api-keys.ts'),
    import('../fleet/fleet-store.ts'),
    import('../sessions/session-store.ts'),
  ]);
  let db: Db;
  try {
    // knex's own warnings (a failed connection, with its stack) are left out: the CLI reports the error itself, in one line.
    if (where.databaseUrl) db = openDatabase({ databaseUrl: where.databaseUrl, pgliteDir: where.pgliteDir, logger: QUIET });
    else {
      const embedded = await openEmbeddedClient(where.pgliteDir);
      if (embedded.via === 'server') note(`svc: the server running on it shares it: going through ${embedded.socketPath}`);
      db = embedded.db;
    }
  } catch (err) {
    out(`svc: cannot open the ${where.label}: ${(err as Error).message}`);
    return 1;
  }
  try {
    await migrateToLatest(db);
    if (group === 'runners') {
      const runners = await new FleetStore(db, { leaseMs: SESSION_LEASE.leaseMs }).list();
      if (values.json) out(JSON.stringify(runners));
      else if (runners.length === 0) out('No runner is registered (start one with npm run runner).');
      else {
        for (const r of runners) {
          const load = `cpu ${Math.round((r.load.cpu_share ?? 0) * 100)} %, late frames ${Math.round((r.load.late_frame_share ?? 0) * 100)} %, lag ${r.load.event_loop_lag_ms ?? 0} ms`;
          out(`${r.runnerId}  ${r.state}${r.placeable ? '' : ' (not placeable)'}  ${r.placed}/${r.slots} placed, ${r.liveSessions} live  ${load}  heartbeat ${r.heartbeatAgeSeconds.toFixed(1)} s ago  ${r.url}${r.notPlaceable ? `  (${r.notPlaceable})` : ''}`);
        }
      }
      return 0;
    }
    const keys = new ApiKeys(db);
    if (command === 'create') {
      const created = await keys.create(values.org!, values.name!);
      if (values.json) out(JSON.stringify(created));
      else out(`Created key ${created.api_key_id} "${created.name}" for organization ${created.organization}.\nStore it now; it is not shown again:\n${created.key}`);
      return 0;
    }
    if (command === 'list') {
      const list = await keys.list(values.org!);
      if (values.json) out(JSON.stringify(list));
      else for (const k of list) out(`${k.api_key_id}  ${k.prefix}...  ${k.name}  created ${k.created_at}${k.revoked_at ? `  REVOKED ${k.revoked_at}` : ''}`);
      return 0;
    }
    const done = await keys.revoke(arg!);
    out(done ? `Revoked ${arg}.` : `No active key ${arg}.`);
    return done ? 0 : 1;
  } catch (err) {
    out(`svc: ${(err as Error).message}`);
    return 1;
  } finally {
    await closeDatabase(db);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = await runCli(process.argv.slice(2));
}
