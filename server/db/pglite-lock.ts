import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * PGlite is an in-process database: two processes opening the same data directory would
 * corrupt it. Whoever opens it (server or CLI) holds this pid lock; a stale lock of a dead
 * process is taken over.
 */
export class PgliteLock {
  private readonly file: string;
  private held = false;

  constructor(pgliteDir: string) {
    mkdirSync(pgliteDir, { recursive: true });
    this.file = join(pgliteDir, 'svc.lock');
  }

  acquire(): void {
    const holder = this.holder();
    if (holder !== null && holder !== process.pid && isAlive(holder)) {
      throw new Error(`the embedded database is in use by process ${holder}; stop it first, or use DATABASE_URL (PostgreSQL) for concurrent access`);
    }
    writeFileSync(this.file, String(process.pid));
    this.held = true;
  }

  release(): void {
    if (this.held && this.holder() === process.pid) rmSync(this.file, { force: true });
    this.held = false;
  }

  private holder(): number | null {
    try {
      const pid = Number(readFileSync(this.file, 'utf8').trim());
      return Number.isInteger(pid) && pid > 0 ? pid : null;
    } catch {
      return null;
    }
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
