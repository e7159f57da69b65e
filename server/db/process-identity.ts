import { readFileSync } from 'node:fs';

/**
 * A process named so that a reused pid is not mistaken for it: the pid plus the process start
 * time (clock ticks since boot, field 22 of `/proc/<pid>/stat`). Where /proc is missing (not
 * Linux) the start time is null and only the pid is compared.
 */
export interface ProcessIdentity {
  pid: number;
  startTime: string | null;
}

/** Start time of `pid` from /proc, or null when unreadable (no such process, or no /proc). */
export function processStartTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces: split after its last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] ?? null; // fields[0] is field 3 (state); starttime is field 22
  } catch {
    return null;
  }
}

export function currentProcess(): ProcessIdentity {
  return { pid: process.pid, startTime: processStartTime(process.pid) };
}

/** `pid:starttime`, or `pid` alone when the start time is unknown. */
export function formatIdentity(id: ProcessIdentity): string {
  return id.startTime === null ? String(id.pid) : `${id.pid}:${id.startTime}`;
}

export function parseIdentity(text: string): ProcessIdentity | null {
  const m = /^(\d+)(?::(\d+))?$/.exec(text.trim());
  if (!m) return null;
  const pid = Number(m[1]);
  return pid > 0 && Number.isSafeInteger(pid) ? { pid, startTime: m[2] ?? null } : null;
}

/**
 * Whether the process named by `id` still runs: a process with that pid exists and, when both
 * start times are known, started at the recorded time (otherwise the pid was reused).
 */
export function isProcessAlive(id: ProcessIdentity): boolean {
  try {
    process.kill(id.pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  if (id.startTime === null) return true;
  const now = processStartTime(id.pid);
  return now === null ? true : now === id.startTime;
}

/** Clock ticks per second of /proc/<pid>/stat times (USER_HZ: 100 on every Linux ABI Node runs on). */
const USER_HZ = 100;

/** When `pid` started (epoch ms), from its start time and the boot time in /proc/stat; null when unknown. */
export function processStartEpochMs(pid: number): number | null {
  const ticks = processStartTime(pid);
  if (ticks === null) return null;
  try {
    const btime = /^btime (\d+)$/m.exec(readFileSync('/proc/stat', 'utf8'))?.[1];
    return btime === undefined ? null : Number(btime) * 1000 + (Number(ticks) * 1000) / USER_HZ;
  } catch {
    return null;
  }
}
