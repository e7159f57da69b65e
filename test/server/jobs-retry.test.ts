/**
 * Attempts and backoff (docs/jobs.md): a failed attempt is retried after retryBaseMs x 2^(n-1);
 * after `max_attempts` the job ends `failed` with the reason of its last attempt.
 */
import test from 'ava';
import { until } from '../../testing/until.ts';
import type { Plugin } from '../../core/registry.ts';
import { facePlugin } from '../../plugins/face/index.ts';
import { TEMPLATE_FACE_ASSET } from '../../server/services/catalogue-seed.ts';
import type { IdleVideoGenerator } from '../../server/services/generation-jobs.ts';
import { startTestServer, type TestServer } from './harness.ts';

const RETRY_BASE_MS = 1_000;
let failuresLeft = 0;

/** Fails while `failuresLeft` > 0 (a passing fault: a storage hiccup, a killed encoder). */
const flakyPlugin: Plugin = {
  name: 'flaky-generator',
  register(registry) {
    registry.register<IdleVideoGenerator>('idle-video-generator', 'flaky', () => ({
      async generate() {
        if (failuresLeft-- > 0) throw new Error('encoder crashed');
        return { data: Buffer.from('VIDEO'), contentType: 'video/mp4', name: 'idle.mp4' };
      },
    }));
  },
};

let s: TestServer;
test.before(async () => {
  // The real face model (idle-v1's), so an undecodable image fails where it would in production.
  s = await startTestServer({ label: 'jobs_retry', plugins: [facePlugin, flakyPlugin], config: { jobs: { maxAttempts: 3, retryBaseMs: RETRY_BASE_MS, pollMs: 50 } } });
});
test.after.always(async () => {
  await s?.stop();
});

const getJob = async (id: string) => (await s.call('GET', `/v1/assets/generate/jobs/${id}`)).body;

/** Every distinct state the job shows while polled until it ends. */
async function followJob(id: string): Promise<any[]> {
  const seen: any[] = [];
  await until(async () => {
    const job = await getJob(id);
    if (JSON.stringify(seen.at(-1)) !== JSON.stringify(job)) seen.push(job);
    return job.status === 'succeeded' || job.status === 'failed';
  }, { timeoutMs: 120_000, intervalMs: 20, what: `job ${id} to end` });
  return seen;
}

async function uploadImage(bytes: Buffer): Promise<string> {
  const init = (await s.call('POST', '/v1/assets/initiate-upload', { body: { name: 'broken.png', category: 'image' } })).body;
  const signed = (await s.call('POST', '/v1/assets/sign-part', { body: { ...init, part_number: 1 } })).body;
  const etag = (await fetch(signed.upload_url, { method: 'PUT', body: new Uint8Array(bytes) })).headers.get('etag');
  const done = await s.call('POST', '/v1/assets', {
    body: { asset_id: init.asset_id, upload_id: init.upload_id, name: 'broken.png', category: 'image', content_type: 'image/png', size_bytes: bytes.length, parts: [{ part_number: 1, etag }] },
  });
  if (done.status !== 201) throw new Error(`upload failed: ${done.text}`);
  return init.asset_id;
}

test.serial('a job that fails every time is retried with exponential backoff, then fails with its reason after max_attempts', async (t) => {
  const source = await uploadImage(Buffer.from('this is not a PNG image at all'));
  const res = await s.call('POST', '/v1/assets/generate/idle-v1', { body: { source_asset_id: source, model_variant_id: 'svc/human-portrait/v1' } });
  t.is(res.status, 202);
  const states = await followJob(res.body.job_id);
  const final = states.at(-1);
  t.is(final.status, 'failed');
  t.is(final.attempts, 3);
  t.is(final.max_attempts, 3);
  t.truthy(final.error, 'the reason of the last attempt');
  t.regex(final.error, /could not be decoded/);
  t.is(final.error, final.last_error);
  t.is(final.result, null);
  t.is(final.next_attempt_at, null);

  // Between attempts the job waits queued; each wait is twice the previous one (database times).
  const waits = states.filter((j) => j.status === 'queued' && j.attempts > 0);
  t.deepEqual(waits.map((j) => j.attempts), [1, 2], `queued after attempts 1 and 2: ${JSON.stringify(states.map((j) => [j.status, j.attempts]))}`);
  for (const wait of waits) {
    t.is(wait.last_error, final.error, 'the same deterministic reason each time');
    t.is(wait.error, null, 'not failed yet');
    const delay = Date.parse(wait.next_attempt_at) - Date.parse(wait.updated_at);
    const expected = RETRY_BASE_MS * 2 ** (wait.attempts - 1);
    t.true(delay >= expected - 1 && delay < expected + 1_000, `attempt ${wait.attempts}: next attempt ${delay} ms after the failure, expected ${expected}`);
  }
  // Attempt 2 started no earlier than it was due: it failed after the first wait's next_attempt_at.
  t.true(Date.parse(waits[1]!.updated_at) >= Date.parse(waits[0]!.next_attempt_at));
});

test.serial('a passing fault: the next attempt succeeds and the job reports the attempts it took', async (t) => {
  failuresLeft = 1;
  const res = await s.call('POST', '/v1/assets/generate/flaky', { body: { source_asset_id: TEMPLATE_FACE_ASSET.asset_id } });
  const states = await followJob(res.body.job_id);
  const final = states.at(-1);
  t.is(final.status, 'succeeded');
  t.is(final.attempts, 2);
  t.is(final.error, null, 'a succeeded job has no error');
  t.is(final.last_error, 'encoder crashed', 'the failed attempt stays visible');
  t.truthy((await s.call('GET', `/v1/assets/${final.result.asset_id}`)).body.asset_url);
});

test.serial('a worker that polls rarely still starts a retry when it is due: it woke at the next_attempt_at it read', async (t) => {
  // A minute between looks, as on the embedded database (30 s): only the wake-up at the retry's
  // due time can start the second attempt within seconds.
  const rare = await startTestServer({ label: 'jobs_rare_poll', plugins: [facePlugin, flakyPlugin], config: { jobs: { maxAttempts: 2, retryBaseMs: 300, pollMs: 60_000 } } });
  t.teardown(() => rare.stop());
  failuresLeft = 1;
  const res = await rare.call('POST', '/v1/assets/generate/flaky', { body: { source_asset_id: TEMPLATE_FACE_ASSET.asset_id } });
  t.is(res.status, 202);
  // Half the poll period: a retry left to the next poll would time out here.
  const final = await until(async () => {
    const job = (await rare.call('GET', `/v1/assets/generate/jobs/${res.body.job_id}`)).body;
    return job.status === 'succeeded' ? job : undefined;
  }, { timeoutMs: 30_000, intervalMs: 50, what: 'the retried job to succeed' });
  t.is(final.attempts, 2);
});
