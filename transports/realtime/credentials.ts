/**
 * Credentials for the real-time face-model clients: an API key and a config_id, from the
 * environment (`SVC_API_KEY`, `SVC_CONFIG_ID`) or an optional `.env` file. Missing values fail
 * loudly, naming what is missing and where it was looked for.
 */
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';

export interface SvcCredentials {
  readonly apiKey: string;
  readonly configId: string;
}

export class CredentialsError extends Error {
  constructor(readonly missing: readonly string[], message: string) {
    super(message);
    this.name = 'CredentialsError';
  }
}

/** Parses `KEY=value` lines (comments, `export`, single and double quotes). */
export function parseDotEnv(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const m = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/.exec(line);
    if (!m) continue;
    let value = m[2]!.trim();
    if ((value.startsWith('"') && value.endsWith('"')) || (value.startsWith("'") && value.endsWith("'"))) value = value.slice(1, -1);
    else value = value.replace(/\s+#.*$/, '');
    out[m[1]!] = value;
  }
  return out;
}

export interface ResolveCredentialsOptions {
  /** Path of the .env file (default `.env` in the working directory); optional. */
  readonly envFile?: string;
  readonly env?: NodeJS.ProcessEnv;
}

/** Environment variables win over the .env file. */
export function resolveCredentials(options: ResolveCredentialsOptions = {}): SvcCredentials {
  const env = options.env ?? process.env;
  const file = resolve(options.envFile ?? '.env');
  const fromFile = existsSync(file) ? parseDotEnv(readFileSync(file, 'utf8')) : {};
  const apiKey = env.SVC_API_KEY || fromFile.SVC_API_KEY;
  const configId = env.SVC_CONFIG_ID || fromFile.SVC_CONFIG_ID;
  const missing = [!apiKey && 'SVC_API_KEY', !configId && 'SVC_CONFIG_ID'].filter((x): x is string => Boolean(x));
  if (missing.length) {
    throw new CredentialsError(missing, `missing ${missing.join(' and ')}: set ${missing.length > 1 ? 'them' : 'it'} in the environment or in ${file}`);
  }
  return { apiKey: apiKey!, configId: configId! };
}
