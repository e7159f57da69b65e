/**
 * The server's own files are its owner's only: folders 0700, files 0600, as PostgreSQL requires of
 * its data directory. The embedded database (PGlite) writes most of its files 0666 whatever the
 * umask (its WebAssembly filesystem sets the mode itself: 968 of 972 files of a fresh database,
 * measured), including the catalogs and the WAL, which hold organization and agent names and
 * client_user_refs; stored objects were 0644.
 *
 * `makePrivate` takes group and other bits off a folder (and, when asked, everything under it,
 * without following symbolic links) and says what it changed; it refuses, naming the path, what
 * it cannot fix (a file of another user). `securePrivateData` applies it at start-up to
 * `SVC_DATA_DIR` (the folder itself: other things may live there) and to everything in the PGlite
 * directory and the filesystem storage root (one lstat per file);
 * the storage writes new objects 0600 and PGlite's connection tightens its own files when it
 * opens (db/connect.ts).
 */
import { chmodSync, lstatSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';

export const PRIVATE_MODES = {
  directory: 0o700,
  file: 0o600,
  /** Bits that must be clear: nothing for group and others. */
  groupAndOther: 0o077,
} as const;

export class PrivateFilesError extends Error {
  readonly code = 'private_files_unfixable';
  constructor(readonly path: string, cause: unknown) {
    super(`${path} is readable or writable by other users and could not be made private (${cause instanceof Error ? cause.message : String(cause)}); make it owned by the server's user with mode 0700 (folders) / 0600 (files)`);
    this.name = 'PrivateFilesError';
  }
}

export interface PrivateReport {
  /** Paths whose mode was tightened. */
  readonly fixed: readonly string[];
}

/**
 * Creates `dir` (0700) when missing and takes group/other bits off it, and with `recursive` off
 * everything under it. Symbolic links are neither followed nor changed.
 */
export function makePrivate(dir: string, options: { readonly recursive: boolean }): PrivateReport {
  mkdirSync(dir, { recursive: true, mode: PRIVATE_MODES.directory });
  const fixed: string[] = [];
  const visit = (path: string) => {
    let stat;
    try {
      stat = lstatSync(path);
    } catch {
      return; // removed meanwhile (the database may be running)
    }
    if (stat.isSymbolicLink()) return;
    if ((stat.mode & PRIVATE_MODES.groupAndOther) !== 0) {
      try {
        chmodSync(path, stat.mode & 0o7700);
      } catch (error) {
        throw new PrivateFilesError(path, error);
      }
      fixed.push(path);
    }
    if (options.recursive && stat.isDirectory()) for (const name of readdirSync(path)) visit(join(path, name));
  };
  visit(dir);
  return { fixed };
}

/** What `securePrivateData` reads of the server configuration. */
export interface PrivateDataConfig {
  readonly dataDir: string;
  readonly databaseUrl?: string;
  readonly storage: { readonly driver: 'filesystem'; readonly root?: string } | { readonly driver: 's3' };
}

/**
 * At start-up, before the database opens: SVC_DATA_DIR, the PGlite directory (when embedded) and
 * the filesystem storage root are made private. One warning says what was tightened; a path that
 * cannot be fixed stops the start (`PrivateFilesError`).
 */
export function securePrivateData(config: PrivateDataConfig, logger: Pick<Logger, 'warn'>): PrivateReport {
  const fixed = [...makePrivate(config.dataDir, { recursive: false }).fixed];
  if (!config.databaseUrl) fixed.push(...makePrivate(join(config.dataDir, 'pglite'), { recursive: true }).fixed);
  if (config.storage.driver === 'filesystem') fixed.push(...makePrivate(config.storage.root ?? join(config.dataDir, 'objects'), { recursive: true }).fixed);
  if (fixed.length > 0) {
    logger.warn({ data_dir: config.dataDir, fixed: fixed.length, examples: fixed.slice(0, 3) }, `${fixed.length} files and folders of the server's data were open to other users: made private (folders 0700, files 0600)`);
  }
  return { fixed };
}
