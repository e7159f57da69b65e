/**
 * Time source for everything real-time. Production uses `RealClock`; tests use `VirtualClock`,
 * which only moves when told to, so real-time behaviour is tested faster than real time.
 * All values are milliseconds.
 */
export interface TimerHandle {
  readonly id: number;
}

export interface Clock {
  /** Monotonic milliseconds. */
  now(): number;
  setTimeout(fn: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle | undefined): void;
  setInterval(fn: () => void, ms: number): TimerHandle;
  clearInterval(handle: TimerHandle | undefined): void;
  /** Resolves after `ms`; rejects with an AbortError when `signal` aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** Timers currently scheduled (leak checks). */
  pendingTimers(): number;
}

export function abortError(reason?: unknown): Error {
  // A DOMException is not a plain Error to every consumer (test runners, loggers): wrap it.
  if (reason instanceof Error && reason.name === 'AbortError' && !(reason instanceof DOMException)) return reason;
  const err = new Error(typeof reason === 'string' ? reason : 'aborted');
  err.name = 'AbortError';
  return err;
}

export function isAbortError(err: unknown): boolean {
  return err instanceof Error && err.name === 'AbortError';
}

function sleepWith(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal.reason));
    const onAbort = () => {
      clock.clearTimeout(handle);
      reject(abortError(signal?.reason));
    };
    const handle = clock.setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export interface RealClockOptions {
  /**
   * Timers that do not hold the process open by themselves (Node's `unref`): for waits that only
   * matter while something else keeps the process alive (a server's pacing of its start-ups).
   */
  readonly unref?: boolean;
}

export class RealClock implements Clock {
  private nextId = 1;
  private readonly timers = new Map<number, NodeJS.Timeout>();

  constructor(private readonly options: RealClockOptions = {}) {}

  now(): number {
    return performance.now();
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const id = this.nextId++;
    const timer = setTimeout(() => {
      this.timers.delete(id);
      fn();
    }, Math.max(0, ms));
    if (this.options.unref) timer.unref();
    this.timers.set(id, timer);
    return { id };
  }

  clearTimeout(handle: TimerHandle | undefined): void {
    if (!handle) return;
    const t = this.timers.get(handle.id);
    if (t) clearTimeout(t);
    this.timers.delete(handle.id);
  }

  setInterval(fn: () => void, ms: number): TimerHandle {
    const id = this.nextId++;
    const timer = setInterval(fn, Math.max(1, ms));
    if (this.options.unref) timer.unref();
    this.timers.set(id, timer);
    return { id };
  }

  clearInterval(handle: TimerHandle | undefined): void {
    if (!handle) return;
    const t = this.timers.get(handle.id);
    if (t) clearInterval(t);
    this.timers.delete(handle.id);
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return sleepWith(this, ms, signal);
  }

  pendingTimers(): number {
    return this.timers.size;
  }
}

interface VirtualTimer {
  id: number;
  at: number;
  seq: number;
  fn: () => void;
  every?: number;
}

/** Lets the event loop run queued promise callbacks and I/O callbacks once. */
const flushMicrotasks = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * A clock that moves only through `advance()`. Timers fire in time order; between two
 * timers pending promise callbacks run, so async code awaiting `sleep()` behaves as it would
 * in real time, only faster.
 */
export class VirtualClock implements Clock {
  private current = 0;
  private nextId = 1;
  private seq = 0;
  private readonly timers = new Map<number, VirtualTimer>();

  constructor(start = 0) {
    this.current = start;
  }

  now(): number {
    return this.current;
  }

  setTimeout(fn: () => void, ms: number): TimerHandle {
    const id = this.nextId++;
    this.timers.set(id, { id, at: this.current + Math.max(0, ms), seq: this.seq++, fn });
    return { id };
  }

  clearTimeout(handle: TimerHandle | undefined): void {
    if (handle) this.timers.delete(handle.id);
  }

  setInterval(fn: () => void, ms: number): TimerHandle {
    const id = this.nextId++;
    const every = Math.max(1, ms);
    this.timers.set(id, { id, at: this.current + every, seq: this.seq++, fn, every });
    return { id };
  }

  clearInterval(handle: TimerHandle | undefined): void {
    this.clearTimeout(handle);
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return sleepWith(this, ms, signal);
  }

  pendingTimers(): number {
    return this.timers.size;
  }

  /** Moves time forward by `ms`, firing every timer due on the way. */
  async advance(ms: number): Promise<void> {
    const target = this.current + ms;
    await flushMicrotasks();
    for (;;) {
      const next = this.nextDue(target);
      if (!next) break;
      this.current = next.at;
      if (next.every !== undefined) {
        next.at += next.every;
        next.seq = this.seq++;
      } else {
        this.timers.delete(next.id);
      }
      next.fn();
      await flushMicrotasks();
    }
    this.current = target;
    await flushMicrotasks();
  }

  /** Advances in steps until `predicate` holds or `maxMs` passes; returns whether it held. */
  async advanceUntil(predicate: () => boolean, maxMs: number, stepMs = 10): Promise<boolean> {
    const end = this.current + maxMs;
    while (!predicate()) {
      if (this.current >= end) return false;
      await this.advance(Math.min(stepMs, end - this.current));
    }
    return true;
  }

  private nextDue(limit: number): VirtualTimer | undefined {
    let best: VirtualTimer | undefined;
    for (const t of this.timers.values()) {
      if (t.at > limit) continue;
      if (!best || t.at < best.at || (t.at === best.at && t.seq < best.seq)) best = t;
    }
    return best;
  }
}

/**
 * A signal that aborts with `parent` but can be detached once the work it guards is done, so
 * long-lived parents (one per processor generation) do not collect a listener per request.
 */
export function linkedSignal(parent: AbortSignal): { signal: AbortSignal; release(): void } {
  const controller = new AbortController();
  if (parent.aborted) {
    controller.abort(parent.reason);
    return { signal: controller.signal, release: () => undefined };
  }
  const onAbort = () => controller.abort(parent.reason);
  parent.addEventListener('abort', onAbort, { once: true });
  return { signal: controller.signal, release: () => parent.removeEventListener('abort', onAbort) };
}

/**
 * `promise`'s value, or `'timeout'` when `ms` pass first on `clock` (virtual or real); the timer
 * is cleared once the promise settles. The promise itself is not cancelled.
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, clock: Clock): Promise<T | 'timeout'> {
  let timer: TimerHandle | undefined;
  return Promise.race([
    promise.finally(() => clock.clearTimeout(timer)),
    new Promise<'timeout'>((resolve) => (timer = clock.setTimeout(() => resolve('timeout'), ms))),
  ]);
}
