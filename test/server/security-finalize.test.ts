import test from 'ava';
import { holdsWithin } from '../../testing/until.ts';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { FINALIZE_CLAIM_STALE_MS } from '../../server/services/assets.ts';
import { isErrorBody, startTestServer, type TestServer } from './harness.ts';

// Issue 17 item 2: racing finalizes of one upload; a part still streaming when its upload is finalized.

const MB = 1024 * 1024;
let s: TestServer;
test.before(async () => {
  s = await startTestServer({ label: 'sec_finalize' });
});
test.after.always(async () => {
  await s?.stop();
});

interface Upload {
  init: { asset_id: string; upload_id: string };
  etags: string[];
  bytes: Buffer;
}

/** Initiates without size_bytes (so a finalize may claim any size) and uploads `parts`. */
async function upload(parts: Buffer[]): Promise<Upload> {
  const init = await s.call('POST', '/v1/assets/initiate-upload', { body: { name: 'race.bin', category: 'weight', content_type: 'application/octet-stream' } });
  if (init.status !== 200) throw new Error(init.text);
  const etags: string[] = [];
  for (const [i, part] of parts.entries()) {
    const signed = await s.call('POST', '/v1/assets/sign-part', { body: { asset_id: init.body.asset_id, upload_id: init.body.upload_id, part_number: i + 1 } });
    const put = await fetch(signed.body.upload_url, { method: 'PUT', body: new Uint8Array(part) });
    if (put.status !== 200) throw new Error(await put.text());
    etags.push(put.headers.get('etag')!);
  }
  return { init: init.body, etags, bytes: Buffer.concat(parts) };
}

const finalize = (u: Upload, sizeBytes: number) =>
  s.call('POST', '/v1/assets', {
    body: {
      asset_id: u.init.asset_id, upload_id: u.init.upload_id, name: 'race.bin', category: 'weight', content_type: 'application/octet-stream',
      size_bytes: sizeBytes, parts: u.etags.map((etag, i) => ({ part_number: i + 1, etag })),
    },
  });

test('racing finalizes of one upload: a 201 asset always has its object (a loser never deletes or replaces it)', async (t) => {
  // The loser here claims a wrong size: before the fix it assembled too, and its size-mismatch
  // cleanup deleted the object the winner had just published.
  for (let round = 0; round < 4; round++) {
    const u = await upload([randomBytes(5 * MB), randomBytes(3 * MB)]);
    const [good, bad] = await Promise.all([finalize(u, u.bytes.length), finalize(u, u.bytes.length + 1)]);
    t.not(bad.status, 201, 'a wrong size is never accepted');
    t.true(bad.status === 409 || bad.status === 404, `loser: ${bad.status} ${bad.text}`);
    t.true(isErrorBody(bad.body));
    let asset = good;
    if (good.status !== 201) {
      // The loser claimed first and released on its size mismatch: the upload is intact and the
      // good finalize, retried, succeeds.
      t.is(good.body.details?.reason, 'already_finalized', good.text);
      asset = await finalize(u, u.bytes.length);
    }
    t.is(asset.status, 201, asset.text);
    const download = await fetch(asset.body.asset_url);
    t.is(download.status, 200, `round ${round}: the finalized asset's object exists`);
    t.true(Buffer.from(await download.arrayBuffer()).equals(u.bytes), `round ${round}: byte-exact`);
  }
});

test('a finalize finding the upload claimed by another finalize answers 409 already_finalized and touches nothing', async (t) => {
  const u = await upload([randomBytes(1000)]);
  // The state a finalize in progress leaves in the database: its claim on the session.
  await s.server.db('upload_sessions').where('asset_id', u.init.asset_id).update({ upload_id: `finalizing:${u.init.upload_id}` });
  const res = await finalize(u, 1000);
  t.is(res.status, 409);
  t.is(res.body.code, 'upload_conflict');
  t.is(res.body.details.reason, 'already_finalized');
  t.true(isErrorBody(res.body));
  t.true(existsSync(join(s.dataDir, 'objects', 'uploads', u.init.upload_id, '1')), 'the parts are untouched');
  t.is((await s.call('GET', `/v1/assets/${u.init.asset_id}`)).status, 404, 'no asset was recorded');
  // The claim's owner gives it back (as a failed verification does): the upload finalizes.
  await s.server.db('upload_sessions').where('asset_id', u.init.asset_id).update({ upload_id: u.init.upload_id });
  t.is((await finalize(u, 1000)).status, 201);
});

/** The state a finalize that died holding its claim leaves, `ageMinutes` ago. */
async function staleClaim(u: Upload, ageMinutes: number, token: string | null = 'the-dead-finalize') {
  await s.server.db('upload_sessions').where('asset_id', u.init.asset_id).update({
    upload_id: `finalizing:${u.init.upload_id}`,
    claim_token: token,
    claimed_at: s.server.db.raw(`now() - make_interval(mins => ${ageMinutes})`),
  });
}

test('a claim older than FINALIZE_CLAIM_STALE_MS (its finalize died) is taken over: the upload finalizes instead of 409 until the 24 h sweep', async (t) => {
  const u = await upload([randomBytes(1200)]);
  const boundMinutes = FINALIZE_CLAIM_STALE_MS / 60_000;
  await staleClaim(u, boundMinutes - 1);
  const held = await finalize(u, 1200);
  t.is(held.status, 409, 'a claim younger than the bound is a finalize in progress');
  t.is(held.body.details.reason, 'already_finalized');
  await staleClaim(u, boundMinutes + 1);
  const res = await finalize(u, 1200);
  t.is(res.status, 201, res.text);
  t.true(Buffer.from(await (await fetch(res.body.asset_url)).arrayBuffer()).equals(u.bytes), 'byte-exact');
  t.is(await s.server.db('upload_sessions').where('asset_id', u.init.asset_id).first(), undefined, 'the session is gone');
});

test('a stale claim without a token (made before claims had one) is taken over too', async (t) => {
  const u = await upload([randomBytes(800)]);
  await staleClaim(u, FINALIZE_CLAIM_STALE_MS / 60_000 + 1, null);
  const res = await finalize(u, 800);
  t.is(res.status, 201, res.text);
  t.true(Buffer.from(await (await fetch(res.body.asset_url)).arrayBuffer()).equals(u.bytes));
});

test('a stale claim whose finalize assembled the object before it died: the next finalize records that object', async (t) => {
  const u = await upload([randomBytes(5 * MB), randomBytes(700)]);
  const row = await s.server.db('upload_sessions').where('asset_id', u.init.asset_id).first();
  // The dead finalize got as far as the assembly (the parts are consumed), then died.
  const parts = u.etags.map((etag, i) => ({ part_number: i + 1, etag }));
  await s.server.storage.completeMultipartUpload(row.storage_key, u.init.upload_id, parts, u.bytes.length);
  await staleClaim(u, FINALIZE_CLAIM_STALE_MS / 60_000 + 1);
  const res = await finalize(u, u.bytes.length);
  t.is(res.status, 201, res.text);
  t.true(Buffer.from(await (await fetch(res.body.asset_url)).arrayBuffer()).equals(u.bytes), 'the object the dead finalize assembled');
});

test('a claim taken over is no longer its old holder\'s: racing takeovers have one winner, and the loser touches nothing', async (t) => {
  const u = await upload([randomBytes(900)]);
  await staleClaim(u, FINALIZE_CLAIM_STALE_MS / 60_000 + 1);
  const [a, b] = await Promise.all([finalize(u, 900), finalize(u, 900)]);
  t.is([a, b].filter((r) => r.status === 201).length, 1, `${a.text} / ${b.text}`);
  const [winner, loser] = a.status === 201 ? [a, b] : [b, a];
  // The loser read the claim before the winner took it over (409) or after the winner finished (404).
  if (loser.status === 409) t.is(loser.body.details.reason, 'already_finalized');
  else t.is(loser.body.code, 'upload_not_found', loser.text);
  t.true(isErrorBody(loser.body));
  t.true(Buffer.from(await (await fetch(winner.body.asset_url)).arrayBuffer()).equals(u.bytes));
});

test('a finalize failing verification releases its claim: the parts are kept and a corrected finalize succeeds', async (t) => {
  const u = await upload([randomBytes(1500)]);
  const wrong = await finalize(u, 1499);
  t.is(wrong.status, 409);
  t.is(wrong.body.details.reason, 'size_mismatch');
  const right = await finalize(u, 1500);
  t.is(right.status, 201, right.text);
  t.true(Buffer.from(await (await fetch(right.body.asset_url)).arrayBuffer()).equals(u.bytes));
});

test('a part PUT still streaming when its upload is finalized answers 404 upload_not_found, not 500', async (t) => {
  const u = await upload([randomBytes(2000)]);
  const signed = await s.call('POST', '/v1/assets/sign-part', { body: { asset_id: u.init.asset_id, upload_id: u.init.upload_id, part_number: 2 } });
  const url = new URL(signed.body.upload_url);
  const uploadDir = join(s.dataDir, 'objects', 'uploads', u.init.upload_id);
  const response = new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = http.request({ host: url.hostname, port: url.port, method: 'PUT', path: url.pathname + url.search, headers: { 'content-length': 4000 } }, (res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
    req.write(randomBytes(2000));
    // Once the server is writing the part (its temporary file exists), finalize with part 1 only.
    const waitForTemp = async () => {
      await holdsWithin(() => readdirSync(uploadDir).some((f) => f.endsWith('.tmp')), { timeoutMs: 5000 });
      const done = await finalize(u, 2000);
      t.is(done.status, 201, done.text);
      req.end(randomBytes(2000));
    };
    waitForTemp().catch(reject);
  });
  const res = await response;
  t.is(res.status, 404, res.body);
  const body = JSON.parse(res.body);
  t.is(body.code, 'upload_not_found');
  t.true(isErrorBody(body));
});
