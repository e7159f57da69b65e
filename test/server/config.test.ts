/** Configuration from the environment: defaults, the webhook allow-list, refusal of bad values. */
import test from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfigFromEnv } from '../../server/config/env.ts';
import { WebhookClient } from '../../processors/tools/index.ts';

function withDataDir(run: (dir: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), 'svc-config-'));
  try {
    run(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('webhooks reach nothing private by default; SVC_WEBHOOK_ALLOWED_RANGES lists what an operator opens', (t) => {
  withDataDir((dir) => {
    t.deepEqual(loadConfigFromEnv({ SVC_DATA_DIR: dir }).webhookAllowedRanges, []);
    const config = loadConfigFromEnv({ SVC_DATA_DIR: dir, SVC_WEBHOOK_ALLOWED_RANGES: ' 10.20.0.0/16, 127.0.0.1 ,' });
    t.deepEqual(config.webhookAllowedRanges, ['10.20.0.0/16', '127.0.0.1']);
    // The list is what the runtime hands to the webhook client.
    t.notThrows(() => new WebhookClient({ allowedRanges: config.webhookAllowedRanges }));
  });
});

test('a malformed allowed range stops the configuration at start-up with a message naming it', (t) => {
  withDataDir((dir) => {
    const error = t.throws(() => loadConfigFromEnv({ SVC_DATA_DIR: dir, SVC_WEBHOOK_ALLOWED_RANGES: '10.0.0.0/8,10.0.0.300/33' }));
    t.regex(error!.message, /10\.0\.0\.300\/33/);
  });
});

test('embedded defaults: PGlite under the data dir, filesystem storage, secrets generated once and kept', (t) => {
  withDataDir((dir) => {
    const first = loadConfigFromEnv({ SVC_DATA_DIR: dir });
    t.is(first.databaseUrl, undefined);
    t.like(first.storage, { driver: 'filesystem', root: join(dir, 'objects') });
    t.true(first.encryptionKey.length >= 32);
    const second = loadConfigFromEnv({ SVC_DATA_DIR: dir });
    t.is(second.encryptionKey, first.encryptionKey);
    t.is(second.signingSecret, first.signingSecret);
  });
});
