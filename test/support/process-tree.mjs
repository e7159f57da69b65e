/**
 * Processes as Linux shows them in /proc: a process's descendants, whether one is still running
 * (a zombie is not), and ending a whole tree. Plain JavaScript, no TypeScript loader: loaded
 * (--import) into ava's processes before tsx (exit-with-parent.mjs) and used by the test runner
 * (scripts/run-tests.ts). Test-only code.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** pid, parent pid, process group and state ('Z' zombie) of every process, read from /proc. */
export function processTable() {
  const table = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    let stat;
    try {
      stat = readFileSync(`/proc/${name}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // The command name (2nd field) may hold spaces and parentheses: fields start after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    table.push({ pid: Number(name), comm: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')), state: fields[0], ppid: Number(fields[1]), pgid: Number(fields[2]) });
  }
  return table;
}

/** Every process below `pid` (children, their children, ...), nearest first. */
export function descendantsOf(pid, table = processTable()) {
  const children = new Map();
  for (const p of table) {
    if (!children.has(p.ppid)) children.set(p.ppid, []);
    children.get(p.ppid).push(p);
  }
  const out = [];
  const queue = [pid];
  while (queue.length) {
    for (const child of children.get(queue.shift()) ?? []) {
      out.push(child);
      queue.push(child.pid);
    }
  }
  return out;
}

/** Whether `pid` runs (exists and is not a zombie waiting for its parent). */
export function isRunning(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

function signal(target, sig) {
  try {
    process.kill(target, sig);
  } catch {
    // gone already
  }
}

/**
 * Signals every process below `pid`, and the process groups they lead (chromium, which playwright
 * starts in a group of its own; servers tests start detached), so that nothing they started
 * survives either. Twice: a process may start another while the first pass runs.
 */
export function signalDescendants(pid, sig) {
  for (let pass = 0; pass < 2; pass++) {
    for (const p of descendantsOf(pid)) {
      if (p.pgid === p.pid) signal(-p.pid, sig);
      signal(p.pid, sig);
    }
  }
}
