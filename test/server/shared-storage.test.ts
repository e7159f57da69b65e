/**
 * Several processes on one database, each with filesystem storage of its own (issue 25): a second
 * process writes the bundled default face into its own storage at start (so the template face is
 * everywhere), says in one line that its storage is not shared when the database records assets it
 * lacks, and a face made from such an asset fails as `face_unavailable` with no file path in it.
 */
import test from 'ava';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { Registry } from '../../core/registry.ts';
import { createServer } from '../../server/build-server.ts';
import { TEMPLATE_FACE_ASSET } from '../../server/services/catalogue-seed.ts';
import { TEMPLATE_ORGANIZATION } from '../../server/services/organizations.ts';
import { createSessionFaceResolver, FaceUnavailableError } from '../../server/sessions/agent-face.ts';
import { SECRETS, startTestServer, testFacePlugin } from './harness.ts';

test('a second process with its own storage: the template face is seeded into it, the unshared storage is reported in one line, and a face from the other storage is face_unavailable without a path', async (t) => {
  const first = await startTestServer({ label: 'shared_storage', pglite: false });
  t.teardown(() => first.stop());
  const org = (await first.server.services.apiKeys.authenticateCached(first.keyA))!.organizationId;
  const png = readFileSync(new URL(TEMPLATE_FACE_ASSET.file));
  const asset = await first.server.services.assets.createFromBytes(org, 'test', { name: 'me.png', category: 'image', content_type: 'image/png', data: png });
  const config = await first.call('POST', '/v1/model-configs', { body: { title: 'my face', model_variant_id: 'svc/test-portrait/v1', model_configurations: { reference_image_asset_id: asset.asset_id } } });
  t.is(config.status, 201, config.text);

  const dataDir = mkdtempSync(join(tmpdir(), 'svc-second-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const lines: { level: number; msg: string }[] = [];
  const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  const registry = new Registry().use(testFacePlugin);
  const second = await createServer({ ...SECRETS, port: 0, host: '127.0.0.1', dataDir, databaseUrl: first.databaseUrl }, { registry, logger });
  t.teardown(() => second.close());

  const templateKey = `${TEMPLATE_ORGANIZATION.organization_id}/${TEMPLATE_FACE_ASSET.asset_id}`;
  t.truthy(await second.storage.headObject(templateKey), 'the default face is in the second process storage');
  t.deepEqual(await second.storage.getObject(templateKey), png);
  const warning = lines.find((l) => l.msg.startsWith('object storage is not shared'));
  t.truthy(warning, JSON.stringify(lines));
  t.regex(warning!.msg, /1 of the 1 latest assets recorded in the database are missing from this process's storage .*STORAGE_DRIVER=s3.*STORAGE_ROOT/);

  const resolve = createSessionFaceResolver({ db: second.db, storage: second.storage, registry: second.registry, services: second.services });
  const error = await t.throwsAsync(resolve({ organization_id: org, face_id: config.body.model_config_id }), { instanceOf: FaceUnavailableError });
  t.is((error as FaceUnavailableError).failureCode, 'face_unavailable');
  t.notRegex(error!.message, /\/(tmp|work|root)\//, 'no file path');
  // The template face (the bundled image) resolves on the second process from its own storage.
  const fallback = await resolve({ organization_id: org, face_id: 'svc/test-portrait' });
  t.truthy(fallback.referenceImage);
});
