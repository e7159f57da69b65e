/**
 * What a contract suite is made of: named checks that throw a `ContractViolation` when the
 * service under test breaks the contract. Runner-agnostic: register each check as a test of
 * your runner (`for (const c of sttContract(subject)) test(c.name, () => c.run())`), or run them
 * all with `runContract` and read the results.
 */
import { ProviderError } from '../../core/provider-error.ts';

export interface ContractCheck {
  readonly name: string;
  run(): Promise<void>;
}

export interface ContractResult {
  readonly name: string;
  readonly passed: boolean;
  readonly error?: Error;
}

export class ContractViolation extends Error {
  readonly code = 'contract_violation';
  constructor(message: string) {
    super(message);
    this.name = 'ContractViolation';
  }
}

export const CONTRACT_DEFAULTS = {
  /** Upper bound of any one wait on the service: generous, a loaded machine is slow, not broken. */
  timeoutMs: 20_000,
} as const;

/** Runs every check and reports each (never throws for a failed check). */
export async function runContract(checks: readonly ContractCheck[]): Promise<ContractResult[]> {
  const results: ContractResult[] = [];
  for (const check of checks) {
    try {
      await check.run();
      results.push({ name: check.name, passed: true });
    } catch (err) {
      results.push({ name: check.name, passed: false, error: err instanceof Error ? err : new Error(String(err)) });
    }
  }
  return results;
}

export function ensure(condition: unknown, message: string): asserts condition {
  if (!condition) throw new ContractViolation(message);
}

/** Rejects with a ContractViolation naming `what` if `promise` does not settle within `ms`. */
export async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new ContractViolation(`${what} did not happen within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** An abort must surface as an abort, not as a provider failure. */
export function isAbort(err: unknown, signal: AbortSignal): boolean {
  return signal.aborted && (err === signal.reason || (err instanceof Error && (err.name === 'AbortError' || err.name === 'CanceledError' || err.name === 'APIUserAbortError')));
}

/** A refused key is a ProviderError `auth_failed` that trying again cannot fix. */
export function ensureAuthFailure(err: unknown, service: string): void {
  ensure(err instanceof ProviderError, `${service}: a refused key must fail with a ProviderError, got ${describe(err)}`);
  ensure(err.code === 'auth_failed', `${service}: a refused key must have code auth_failed, got ${err.code}`);
  ensure(err.retryable === false, `${service}: a refused key is not retryable`);
}

export function describe(value: unknown): string {
  return value instanceof Error ? `${value.name}: ${value.message}` : String(value);
}
