import test from 'ava';
import type { Plugin } from '../../core/registry.ts';
import { startTestServer } from './harness.ts';

const lateHook: Plugin = {
  name: 'late-hook',
  register(registry) {
    registry.register('asset-hook', 'late', () => ({
      async onImageAssetFinalized(asset: { read(): Promise<Buffer> }) {
        return { bytes: (await asset.read()).length };
      },
    }));
  },
};

test('a hook installed after the first start analyses the template face at the next start', async (t) => {
  const plugins: Plugin[] = [];
  let s = await startTestServer({ label: 'backfill', plugins });
  try {
    const face = '00000000-0000-4000-8000-0000000000a1';
    t.deepEqual((await s.server.db('assets').where('asset_id', face).first()).analysis, {});
    plugins.push(lateHook);
    s = await s.restart();
    await s.server.settled();
    t.deepEqual((await s.server.db('assets').where('asset_id', face).first()).analysis, { late: { bytes: 791555 } });
  } finally {
    await s.stop();
  }
});
