import { parseArgs } from 'node:util';
import { closeDatabase, openDatabase } from '../db/connect.ts';
import { migrateToLatest } from '../db/migrate.ts';
import { loadConfigFromEnv } from '../env-config.ts';
import { ApiKeys } from '../services/api-keys.ts';
import { join } from 'node:path';

const USAGE = `usage:
  svc keys create --org NAME --name LABEL   create a key (printed once)
  svc keys list --org NAME                   list keys (prefix only)
  svc keys revoke ID                         revoke a key
Uses DATABASE_URL, or the embedded database in SVC_DATA_DIR (default .data).`;

/** The CLI standing in for the dashboard's API Keys section. Returns the exit code. */
export async function runCli(argv: string[], out: (line: string) => void = console.log, env = process.env): Promise<number> {
  const { positionals, values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: { org: { type: 'string' }, name: { type: 'string' }, json: { type: 'boolean' } },
  });
  const [group, command, arg] = positionals;
  if (group !== 'keys' || !command) {
    out(USAGE);
    return 2;
  }
  const problem =
    command === 'create' && (!values.org || !values.name) ? 'keys create needs --org NAME and --name LABEL'
    : command === 'list' && !values.org ? 'keys list needs --org NAME'
    : command === 'revoke' && (!arg || !/^[0-9a-f-]{36}$/i.test(arg)) ? 'keys revoke needs a key id'
    : !['create', 'list', 'revoke'].includes(command) ? USAGE
    : null;
  if (problem) {
    out(problem);
    return 2;
  }
  const config = loadConfigFromEnv(env);
  let db;
  try {
    db = openDatabase({ databaseUrl: config.databaseUrl, pgliteDir: join(config.dataDir, 'pglite') });
  } catch (err) {
    out(`cannot open the database: ${(err as Error).message}`);
    return 1;
  }
  try {
    await migrateToLatest(db);
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
    if (command === 'revoke') {
      const done = await keys.revoke(arg!);
      out(done ? `Revoked ${arg}.` : `No active key ${arg}.`);
      return done ? 0 : 1;
    }
    return 2;
  } finally {
    await closeDatabase(db);
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = await runCli(process.argv.slice(2));
}
