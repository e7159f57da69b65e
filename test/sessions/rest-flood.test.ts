/**
 * A busy API client never turns a visitor away (issue 25): a `server/main.ts` process in the
 * default configuration holds live sessions while a load generator in another process (wrk)
 * asks for an agent as fast as it is answered, over 20 connections, with one API key. The flood is answered 429
 * `rate_limited` (and 503 `server_busy` where the REST guard sheds) in part, with the RateLimit
 * headers; a visitor who connects meanwhile is admitted (slots are free: at once, or after at most
 * two `server_busy` answers queued as the widget queues them, each logged with the gate's reading;
 * the machine is checked under the gate's bound before the flood); and the live bots'
 * frames stay on time as the capacity gate judges them: the share later than 10 ms under its
 * bound, and within 3 points of the same sessions' share without the flood, read from the
 * server's own /metrics.
 *
 * The flood and its control are interleaved (issue 23): after the first flood (the one the
 * visitor connects during), the same two sessions are measured over FLOOD_SLICES pairs of a flood
 * slice and a quiet slice of the same length, one after the other. Measured one after the other
 * in two long windows, a CI run's other test files starting or ending made the difference: a
 * loaded run read 27 of 594 late with the flood against 2 of 500 in the window after it, while
 * two runs under a steady `stress-ng --cpu 1` read 2/591 against 6/529 and 0/592 against 0/528.
 * Interleaved, both conditions share whatever the machine is doing.
 */
import test from 'ava';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FACE_CAPACITY, LOAD_WINDOW, REST_LIMITS } from '../../server/capacity/index.ts';
import { until } from '../../testing/until.ts';
import { RoomVisitor } from '../agent/room-visitor.ts';
import { createTestDatabase } from '../server/harness.ts';
import { startServerProcess, type ServerProcess } from './server-process.ts';

const FLOOD_SECONDS = 15;
/** Flood and quiet slices measured alternately, and each slice's length (s). */
const FLOOD_SLICES = 3;
const SLICE_SECONDS = 4;
let server: ServerProcess | undefined;
let database: Awaited<ReturnType<typeof createTestDatabase>> | undefined;
const visitors: RoomVisitor[] = [];
const dataDir = mkdtempSync(join(tmpdir(), 'svc-flood-'));

test.after.always(async () => {
  for (const v of visitors) v.close();
  server?.kill('SIGKILL');
  await server?.exited;
  await database?.drop();
  rmSync(dataDir, { recursive: true, force: true });
});

/** The server's /metrics, read once: each series' value by its full name (0 when absent). */
async function metrics(url: string): Promise<(series: string) => number> {
  const lines = (await (await fetch(`${url}/metrics`)).text()).split('\n');
  return (series) => Number(lines.find((l) => l.startsWith(series + ' '))?.slice(series.length + 1) ?? 0);
}

/** Bot frames recorded so far: how many, and how many within the 10 ms bound. */
async function botFrames(url: string): Promise<{ total: number; onTime: number }> {
  const value = await metrics(url);
  return { total: value('svc_face_frame_lateness_seconds_count{source="bot"}'), onTime: value('svc_face_frame_lateness_seconds_bucket{le="0.01",source="bot"}') };
}

function runWrk(args: string[]): { done: Promise<string>; kill(): void } {
  const child = spawn('wrk', args, { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (out += d));
  // A missing wrk fails this test with the pretest's remedy, not the file with an uncaught error.
  const failed = new Promise<never>((_, reject) => child.once('error', (err) => reject(new Error(`wrk could not be started (${err.message}): the pretest installs it (scripts/prepare-test-machine.sh)`))));
  failed.catch(() => undefined);
  return {
    done: Promise.race([failed, new Promise<string>((resolve) => child.once('exit', () => resolve(out)))]),
    kill: () => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // gone
      }
    },
  };
}

test('a REST flood from another process while sessions run: answered 429/503 in part with RateLimit headers, a visitor admitted (queued at most twice, as the widget queues), live frames on time', async (t) => {
  t.timeout(120_000);
  database = await createTestDatabase('rest_flood');
  server = await startServerProcess({ DATABASE_URL: database.url, SVC_DATA_DIR: dataDir, SVC_METRICS: 'public' });
  const key = server.firstKey!;
  t.truthy(key, server.output);
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${server!.url}${path}`, { method, headers: { 'x-api-key': key, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
    return { status: res.status, headers: res.headers, body: (await res.json().catch(() => undefined)) as any };
  };
  const agentId = (await api('POST', '/v1/agents', { title: 'flooded agent' })).body.agent_id as string;
  t.is((await api('PATCH', `/v1/agents/${agentId}`, { allowed_hostnames: ['*'], max_concurrency: 4, advanced: { max_video_source_dimension: 256 } })).status, 200);
  t.is((await api('PATCH', `/v1/agents/${agentId}/status`, { status: 'published' })).status, 200);
  const connect = async () => {
    const res = await fetch(`${server!.url}/v1/public/agents/connect`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ agent_id: agentId }) });
    return { status: res.status, body: (await res.json()) as any };
  };
  for (let i = 0; i < 2; i++) {
    const s = await connect();
    t.is(s.status, 200, JSON.stringify(s.body));
    visitors.push(await RoomVisitor.join(s.body.room_url, s.body.token));
  }
  await until(() => visitors.every((v) => v.videoFrames > 25), { timeoutMs: 30_000, what: 'both visitors to receive their faces' });

  // The machine itself is under the gate's bound before the flood begins (a loaded CI run's other
  // files, a CPU hog beside it, can put it over the bound with no flood at all: the gate then
  // rightly refuses, and the test would judge the machine rather than the flood).
  const before = await until(async () => {
    const value = await metrics(server!.url);
    return value('svc_capacity_overloaded') === 0 && { share: value('svc_capacity_late_frame_share') };
  }, { timeoutMs: 30_000, intervalMs: 250, what: 'the capacity gate to read the machine under its bound before the flood' });
  t.log(`before the flood: the gate's late-frame share ${before.share.toFixed(3)}`);

  const wrk = runWrk(['-t1', '-c20', `-d${FLOOD_SECONDS}s`, '-H', `X-API-Key: ${key}`, `${server.url}/v1/agents/${agentId}`]);
  t.teardown(() => wrk.kill());
  // Inside the flood: the flooding key is limited, with the headers that say so ...
  // (the key shares its bucket with the flood, which is held between answers: some of the test's
  // own requests find a token, so the first refused one is looked at)
  const limited = await until(async () => {
    const answer = await api('GET', `/v1/agents/${agentId}`);
    return [429, 503].includes(answer.status) && answer;
  }, { timeoutMs: 5_000, intervalMs: 50, what: 'the flooding key to be limited' });
  t.true(limited.status === 429 || limited.status === 503, String(limited.status));
  t.truthy(limited.headers.get('retry-after'));
  if (limited.status === 429) {
    t.is(limited.headers.get('ratelimit-remaining'), '0');
    t.like(limited.body, { code: 'rate_limited' });
  }
  // ... and a visitor is admitted: slots are free. At once, as a rule; a `server_busy` is
  // queued as the widget queues it (docs/widget.md: wait what the server names, ask again), and
  // the visitor must be in before the flood ends. Every refusal is logged with the gate's reading.
  let third = await connect();
  const refusals: string[] = [];
  while (third.status === 503 && third.body?.error_code === 'server_busy' && refusals.length < FLOOD_SECONDS - 2) {
    const gate = await metrics(server.url);
    refusals.push(`server_busy (late-frame share ${gate('svc_capacity_late_frame_share').toFixed(3)}, in use ${gate('svc_capacity_in_use')} of ${gate('svc_capacity_limit')})`);
    await new Promise((resolve) => setTimeout(resolve, 1000 * Math.max(1, Number(third.body.retry_after_seconds) || 1)));
    third = await connect();
  }
  t.log(`the visitor during the flood: admitted after ${refusals.length} refusals${refusals.length ? `: ${refusals.join('; ')}` : ''}`);
  t.is(third.status, 200, JSON.stringify(third.body));
  t.true(refusals.length <= 2, `queued ${refusals.length} times: a visitor waits seconds, not the flood out`);
  visitors.push(await RoomVisitor.join(third.body.room_url, third.body.token));
  await until(() => visitors[2]!.videoFrames > 0, { timeoutMs: 30_000, what: 'the visitor admitted during the flood to receive its face' });
  // It hangs up: the flood is judged against the two sessions it began with (a third bot and its
  // visitor's decoder in this process put the machine itself at its bound: ~1 % of frames late
  // with no flood at all). Its bot's start-up and end (its own first frames, its neighbours'
  // meanwhile) are not the flood's doing, nor judged by the capacity gate
  // (LOAD_WINDOW.startupSettleMs): the judged slices begin once it has settled.
  visitors[2]!.close();
  t.deepEqual((await fetch(`${server.url}/v1/public/agents/connect/${encodeURIComponent(new URL(third.body.room_url).searchParams.get('room')!)}`, { method: 'POST' }).then((r) => r.json())), { released: 1 });
  const report = await wrk.done;
  await new Promise((resolve) => setTimeout(resolve, LOAD_WINDOW.startupSettleMs));

  const requests = Number(/(\d+) requests in/.exec(report)?.[1]);
  const refused = Number(/Non-2xx or 3xx responses: (\d+)/.exec(report)?.[1] ?? 0);
  t.log(`wrk: ${requests} requests answered in ${FLOOD_SECONDS} s, ${refused} of them 429/503`);
  // The flood was refused in part (429 past its key's bucket, 503 while the guard shed) and slowed:
  // past its first refusals each one was held before it was sent, so a generator that never waits
  // got a few answers per connection per second instead of thousands (docs/operations.md: 9,700/s
  // against the guard alone without the hold; 50-100/s here with it), and no longer took the API's core.
  t.true(requests > 0, report);
  t.true(refused > 0, report);
  t.true((await metrics(server.url))('svc_rest_held_total') > 0, 'the flooding client was slowed');
  t.true(requests / FLOOD_SECONDS < 1000, `the flood was answered ${Math.round(requests / FLOOD_SECONDS)} times a second: not slowed`);

  // The judged slices: flood, quiet, flood, quiet ... each SLICE_SECONDS long.
  const flooded = { frames: 0, late: 0 };
  const quiet = { frames: 0, late: 0 };
  const add = (into: { frames: number; late: number }, from: { total: number; onTime: number }, to: { total: number; onTime: number }) => {
    into.frames += to.total - from.total;
    into.late += to.total - from.total - (to.onTime - from.onTime);
  };
  for (let slice = 0; slice < FLOOD_SLICES; slice++) {
    const floodFrom = await botFrames(server.url);
    const sliceWrk = runWrk(['-t1', '-c20', `-d${SLICE_SECONDS}s`, '-H', `X-API-Key: ${key}`, `${server.url}/v1/agents/${agentId}`]);
    t.teardown(() => sliceWrk.kill());
    const sliceReport = await sliceWrk.done;
    t.true(Number(/(\d+) requests in/.exec(sliceReport)?.[1]) > 0, sliceReport);
    const quietFrom = await botFrames(server.url);
    add(flooded, floodFrom, quietFrom);
    // wrk's last held answers may still be on their way: the quiet slice starts once they are sent
    // (at most REST_LIMITS.holdMs), so it holds no part of the flood.
    await new Promise((resolve) => setTimeout(resolve, REST_LIMITS.holdMs));
    const quietStart = await botFrames(server.url);
    await new Promise((resolve) => setTimeout(resolve, SLICE_SECONDS * 1000));
    add(quiet, quietStart, await botFrames(server.url));
  }
  t.log(`bot frames in ${FLOOD_SLICES} flood slices: ${flooded.frames}, ${flooded.late} later than 10 ms; in the quiet slices between them: ${quiet.frames}, ${quiet.late} late`);
  t.true(flooded.frames > FLOOD_SLICES * SLICE_SECONDS * 25 * 2 * 0.8, 'the two bots sent frames through the flood slices');
  t.true(quiet.frames > FLOOD_SLICES * SLICE_SECONDS * 25 * 2 * 0.8, 'the two bots sent frames through the quiet slices');
  // On time, as the capacity gate judges it: under its bound, so no visitor is ever refused
  // late_frames because of the flood; and the flood adds at most 3 points to the share of late
  // frames the same sessions show without it. Measured (issue 25's note): 0-2.9 % late with the flood
  // against 0-0.8 % without, over six runs; the late ones come in bursts with the server's major
  // GC pauses (6-26 ms read from nodejs_gc_duration_seconds), which the flood's allocations bring
  // sooner. Before the REST guard's hold, pacing and turns: 8-10 %, and the visitor was refused.
  t.true(flooded.late / flooded.frames < FACE_CAPACITY.maxLateFrameShare, `${flooded.late} of ${flooded.frames} frames late`);
  t.true(flooded.late / flooded.frames <= quiet.late / quiet.frames + 0.03, `${flooded.late} of ${flooded.frames} frames late with the flood, ${quiet.late} of ${quiet.frames} without`);
});
