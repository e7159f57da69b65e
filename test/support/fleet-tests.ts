/**
 * One fleet shared by the serial cases of a fleet test file (test/sessions/fleet*.test.ts): the
 * fleet is made by the first case that asks for it, the sessions a case started are released when
 * it ends (however it ends: the next case starts from an empty fleet), and `close()` runs when the
 * file ends. Without root and iproute2 a case fails (it does not skip): the CI machine has them.
 *
 * Kept apart from fleet-world.ts, which the fleet bench imports outside ava.
 */
import test, { type ExecutionContext } from 'ava';
import { available, FleetWorld, type FleetWorldOptions } from './fleet-world.ts';

export function sharedFleet(options: FleetWorldOptions): (t: ExecutionContext) => Promise<FleetWorld | null> {
  const canRun = available();
  let fleet: Promise<FleetWorld> | undefined;
  test.after.always(async () => {
    await (await fleet?.catch(() => undefined))?.close();
  });
  test.afterEach.always(async () => {
    await (await fleet?.catch(() => undefined))?.releaseAll();
  });
  return async (t) => {
    if (!(await canRun)) {
      t.fail('the fleet tests need root and iproute2 (ip netns); the CI machine has them');
      return null;
    }
    fleet ??= FleetWorld.create(options);
    return fleet;
  };
}
