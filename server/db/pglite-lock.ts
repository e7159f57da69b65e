import { linkSync, mkdirSync, readFileSync, rmdirSync, statSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { currentProcess, formatIdentity, isProcessAlive, parseIdentity, processStartEpochMs, type ProcessIdentity } from './process-identity.ts';

export const PGLITE_LOCK_RULES = {
  /** A takeover marker older than this was left by a process that died mid-takeover. */
  staleTakeoverMs: 10_000,
  attempts: 20,
  retryDelayMs: 25,
  /** Start times from /proc are in 10 ms ticks; file times are exact: allow for the rounding. */
  clockSlackMs: 2_000,
} as const;

/**
 * PGlite is an in-process database: two processes opening the same data directory would
 * corrupt it. Whoever opens it (server or CLI) holds this lock file, which names the holder by
 * pid and process start time (a pid reused by an unrelated process after a crash is told apart).
 *
 * Taken atomically: the identity is written to a private file, then hard-linked to `svc.lock`
 * (link fails if the name exists, like O_EXCL), so of two processes starting together exactly
 * one gets it. A lock whose holder is dead is removed under a takeover marker (`mkdir`, also
 * atomic) after re-reading it, so two processes cannot both remove and retake it.
 */
export class PgliteLock {
  private readonly file: string;
  private readonly me: ProcessIdentity = currentProcess();
  private held = false;

  constructor(pgliteDir: string) {
    mkdirSync(pgliteDir, { recursive: true });
    this.file = join(pgliteDir, 'svc.lock');
  }

  acquire(): void {
    const mine = `${this.file}.${process.pid}.${Math.random().toString(36).slice(2)}`;
    writeFileSync(mine, formatIdentity(this.me));
    try {
      for (let attempt = 0; attempt < PGLITE_LOCK_RULES.attempts; attempt++) {
        try {
          linkSync(mine, this.file);
          this.held = true;
          return;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        }
        const content = this.read();
        const holder = content === null ? null : parseIdentity(content);
        if (holder && this.isMe(holder)) {
          this.held = true;
          return;
        }
        if (holder && isProcessAlive(holder) && !this.startedAfterLock(holder)) {
          throw new Error(`the embedded database is in use by process ${holder.pid}; stop it first, or use DATABASE_URL (PostgreSQL) for concurrent access`);
        }
        this.removeStale(content);
        sleep(PGLITE_LOCK_RULES.retryDelayMs);
      }
      throw new Error(`could not take the embedded database lock ${this.file}`);
    } finally {
      unlinkSync(mine);
    }
  }

  release(): void {
    if (!this.held) return;
    this.held = false;
    const content = this.read();
    const holder = content === null ? null : parseIdentity(content);
    if (holder && this.isMe(holder)) unlinkSync(this.file);
  }

  /** Removes the lock if it still holds `seen` (a dead holder's), under the takeover marker. */
  private removeStale(seen: string | null): void {
    const marker = `${this.file}.takeover`;
    try {
      mkdirSync(marker);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      try {
        if (Date.now() - statSync(marker).mtimeMs > PGLITE_LOCK_RULES.staleTakeoverMs) rmdirSync(marker);
      } catch {
        // removed meanwhile by its owner
      }
      return; // another process is taking over: retry
    }
    try {
      if (this.read() === seen) unlinkSync(this.file);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    } finally {
      rmdirSync(marker);
    }
  }

  /**
   * A lock written before start times were recorded (`pid` only): its pid is reused when that
   * process started after the lock file was written (a live holder started before writing it).
   */
  private startedAfterLock(holder: ProcessIdentity): boolean {
    if (holder.startTime !== null) return false; // isProcessAlive compared the start times already
    const started = processStartEpochMs(holder.pid);
    if (started === null) return false;
    try {
      return started > statSync(this.file).mtimeMs + PGLITE_LOCK_RULES.clockSlackMs;
    } catch {
      return false;
    }
  }

  private isMe(holder: ProcessIdentity): boolean {
    return holder.pid === this.me.pid && (holder.startTime === null || this.me.startTime === null || holder.startTime === this.me.startTime);
  }

  private read(): string | null {
    try {
      return readFileSync(this.file, 'utf8');
    } catch {
      return null;
    }
  }
}

function sleep(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}
