/**
 * How one process sends a burst of connects for one agent to the database: in batches. One
 * admission transaction at a time per agent; every connect that arrives while it runs waits (holding
 * no database connection) and joins the next one, which decides all of them together: one read of
 * the agent's live sessions, as many admitted (in arrival order) as the limit leaves room for, the
 * rest refused with one computed `retry_after_seconds`. A batch starts one event-loop turn after
 * the connect that opens it, so connects that arrive together start together. A connect is never
 * answered from a reading older than its own arrival, so a slot freed by another process, or a
 * lease that lapsed, is seen by the next batch.
 *
 * Why (issue 25): every admission takes the agent's row lock. 50 connects at once on one process
 * were 50 transactions holding 20 pool connections while queued on that lock (visitors got 500s
 * past the pool's acquire timeout); one at a time without batching, the tenth admission waited for
 * nine transactions before it and a burst took 100-500 ms to decide. In batches a burst is one to a
 * few transactions (those that arrived together, then everyone who arrived meanwhile). Started at
 * once, the first connect went alone and the rest of a burst, released together by one shared
 * agent lookup, waited for its transaction: the last decisions of a warm burst took 40-50 ms; with
 * the turn's wait, 25-36 ms (bench/_admission-burst.ts). The database still decides the limit
 * exactly, across processes: the batch holds the agent's row lock.
 */
interface Waiting<Request, Answer> {
  readonly request: Request;
  readonly resolve: (answer: Answer) => void;
  readonly reject: (error: unknown) => void;
}

export class AdmissionLine<Request, Answer> {
  /**
   * Per agent with connects in line: those waiting for the next batch. An agent is here from its
   * first connect until a batch ends with nobody waiting, so a batch is scheduled or running
   * exactly while its agent is here.
   */
  private readonly agents = new Map<string, Waiting<Request, Answer>[]>();

  /**
   * @param decide decides one batch of connects for one agent, in one transaction; returns one
   *   answer per request, in order. A throw fails every connect of the batch.
   */
  constructor(private readonly decide: (agentId: string, requests: readonly Request[]) => Promise<readonly Answer[]>) {}

  /** Batches being decided or waiting (agents with connects in line). */
  get busyAgents(): number {
    return this.agents.size;
  }

  admit(agentId: string, request: Request): Promise<Answer> {
    return new Promise<Answer>((resolve, reject) => {
      const waiting = this.agents.get(agentId);
      if (waiting) return void waiting.push({ request, resolve, reject });
      this.agents.set(agentId, [{ request, resolve, reject }]);
      // The batch starts after this turn of the event loop: connects that arrived together (a
      // burst's requests read in one turn, or released together by one shared agent lookup) join
      // the same transaction instead of the first one going alone and the rest waiting for it.
      setImmediate(() => void this.next(agentId));
    });
  }

  private async next(agentId: string): Promise<void> {
    const waiting = this.agents.get(agentId);
    if (!waiting) return;
    if (waiting.length === 0) {
      this.agents.delete(agentId);
      return;
    }
    const batch = waiting.splice(0);
    try {
      const answers = await this.decide(
        agentId,
        batch.map((w) => w.request),
      );
      if (answers.length !== batch.length) throw new Error(`admission decided ${answers.length} of ${batch.length} connects`);
      batch.forEach((w, i) => w.resolve(answers[i]!));
    } catch (error) {
      for (const w of batch) w.reject(error);
    } finally {
      void this.next(agentId);
    }
  }
}
