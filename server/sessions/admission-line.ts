/**
 * How one process sends a burst of connects for one agent to the database: one admission
 * transaction at a time per agent (the others wait here, holding no database connection), and
 * when a transaction finds the agent at its limit, every connect that was already waiting before
 * that transaction read the database gets the same refusal at once instead of a transaction of
 * its own. A connect that arrives later asks the database again, so a slot freed by another
 * process, or a lease that lapsed, is seen by the next connect: the answer is never older than
 * what the visitor could have been told had it been first in line.
 *
 * Why (issue 25): every admission takes the agent's row lock. 50 connects at once on one process
 * were 50 transactions holding 20 pool connections while queued on that lock, and the work that
 * followed an admission (the bot's start, marking it active) waited behind them for a connection:
 * past the pool's acquire timeout, visitors got 500s. The database still decides the limit exactly,
 * across processes; this only keeps one process from queuing on its own lock.
 */
export class AdmissionLine<Refusal> {
  private readonly tails = new Map<string, Promise<unknown>>();
  /** Per agent: the last refusal at its limit, and when the transaction that found it began. */
  private readonly full = new Map<string, { readonly decidedAt: number; readonly refusal: Refusal }>();

  /** The refusal a connect that arrived at `arrivedAt` may be given without asking again, if any. */
  refusalFor(agentId: string, arrivedAt: number): Refusal | undefined {
    const entry = this.full.get(agentId);
    return entry && arrivedAt <= entry.decidedAt ? entry.refusal : undefined;
  }

  /** A slot of `agentId` was freed here: nothing waiting is refused from an older answer. */
  freed(agentId: string): void {
    this.full.delete(agentId);
  }

  /**
   * Runs `admit` after the agent's earlier admissions in this process have finished. `admit`
   * gets the time its own reading begins and returns its answer with, when the agent was at its
   * limit, the refusal to give the connects that were waiting meanwhile.
   */
  run<T>(agentId: string, admit: (startedAt: number) => Promise<{ readonly answer: T; readonly atLimit?: Refusal }>): Promise<T> {
    const previous = this.tails.get(agentId) ?? Promise.resolve();
    const turn = previous.then(
      () => this.decide(agentId, admit),
      () => this.decide(agentId, admit),
    );
    const tail = turn.catch(() => undefined);
    this.tails.set(agentId, tail);
    void tail.then(() => {
      if (this.tails.get(agentId) !== tail) return;
      // Nobody waits any more: the next connect asks the database.
      this.tails.delete(agentId);
      this.full.delete(agentId);
    });
    return turn;
  }

  private async decide<T>(agentId: string, admit: (startedAt: number) => Promise<{ readonly answer: T; readonly atLimit?: Refusal }>): Promise<T> {
    const startedAt = performance.now();
    const { answer, atLimit } = await admit(startedAt);
    if (atLimit !== undefined) this.full.set(agentId, { decidedAt: startedAt, refusal: atLimit });
    return answer;
  }
}
