/** Registers the checks of a contract suite as ava tests, titled `<plugin> <check>`. */
import test from 'ava';
import type { ContractCheck } from '../../testing/index.ts';

export function registerContract(plugin: string, checks: readonly ContractCheck[]): void {
  // Serial: each check opens its own connection to one shared fake, and the fakes script replies in order.
  for (const check of checks) test.serial(`${plugin} ${check.name}`, (t) => t.notThrowsAsync(() => check.run()));
}
