/**
 * How one process sends a burst of connects for one agent to the database: one admission
 * transaction at a time per agent (the others wait here, holding no database connection), and an
 * agent found at its limit remembered for a moment, so that the rest of the burst is refused 429
 * at once instead of each taking a transaction of its own.
 *
 * Why (issue 25): every admission takes the agent's row lock. 50 connects at once on one process
 * were 50 transactions holding 20 pool connections while queued on that lock, and the work that
 * followed an admission (the bot's start, marking it active) waited behind them for a connection:
 * past the pool's acquire timeout, visitors got 500s. The database still decides the limit exactly,
 * across processes; this only keeps one process from queuing on its own lock.
 */
export const ADMISSION_LINE = {
  /**
   * How long a refusal for `concurrency_limit` is reused for the same agent. A slot freed meanwhile
   * by another process is seen this much later at most (its own sessions' ends clear it at once);
   * the refusal's `retry_after_seconds` is at least 1 s anyway.
   */
  fullForMs: 1_000,
} as const;

export class AdmissionLine<Refusal> {
  private readonly tails = new Map<string, Promise<unknown>>();
  private readonly full = new Map<string, { readonly until: number; readonly refusal: Refusal }>();

  constructor(private readonly fullForMs: number = ADMISSION_LINE.fullForMs) {}

  /** The remembered refusal of an agent at its limit, if still fresh. */
  refusalFor(agentId: string): Refusal | undefined {
    const entry = this.full.get(agentId);
    if (!entry) return undefined;
    if (performance.now() < entry.until) return entry.refusal;
    this.full.delete(agentId);
    return undefined;
  }

  /** Remembers that `agentId` is at its limit. */
  atLimit(agentId: string, refusal: Refusal): void {
    this.full.set(agentId, { until: performance.now() + this.fullForMs, refusal });
  }

  /** A slot of `agentId` was freed here: the next connect asks the database again. */
  freed(agentId: string): void {
    this.full.delete(agentId);
  }

  /** Runs `admit` after the agent's earlier admissions in this process have finished. */
  run<T>(agentId: string, admit: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(agentId) ?? Promise.resolve();
    const turn = previous.then(admit, admit);
    const tail = turn.catch(() => undefined);
    this.tails.set(agentId, tail);
    void tail.then(() => {
      if (this.tails.get(agentId) === tail) this.tails.delete(agentId);
    });
    return turn;
  }
}
