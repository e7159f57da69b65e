/**
 * Issue 27 across a real NAT, without a relay (test/support/nat-world.ts): a visitor's chromium
 * behind a masquerading home router that lets nothing in unasked, the server (`npm start`) on a
 * private address behind a cloud router that maps a public address 1:1. The cases:
 *
 * - baseline: a visitor on the server's own segment (no NAT) talks with the demo agent;
 * - nothing configured: no media path, reported as `ice_failed` within the widget's setup
 *   timeout, the call record failed with `ice_failed` (the network is hostile);
 * - `SVC_RTC_ANNOUNCED_ADDRESS` (with `SVC_RTC_PORT_MIN`/`MAX`): a whole conversation on a direct
 *   pair whose server side is the announced address, every UDP socket of the server in the range;
 * - the visitor's network changes mid-answer (a new address, then a link flap): the conversation
 *   goes on, one call record.
 *
 * Needs root, iproute2, iptables and chromium: fails (not skips) without them. One world per case
 * (namespaces, server, browser), removed by the case. Time bounds only catch hangs.
 */
import test, { type ExecutionContext } from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { canMakeTestHosts } from '../support/netns.ts';
import { candidatePairs, connectOutcome, converse, framesAdvance, NatWorld, remoteUfrags, selectedPair, SERVER_PUBLIC, type NatWorldOptions } from '../support/nat-world.ts';
import { events, speechWav, waitForEvent } from '../widget/browser.ts';

const available = await canMakeTestHosts();
const CONNECT_TIMEOUT_S = 8;
const PORTS = { min: 42_000, max: 42_019 };
let dir: string;
const wavs: Record<string, string> = {};

test.before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'svc-nat-direct-'));
  wavs.question = await speechWav([9_000, 'What is your name?', 40_000], dir, 'question.wav');
  // Asked twice: the second question comes after the network changed.
  wavs.twice = await speechWav([9_000, 'What is your name?', 16_000, 'What is your name?', 40_000], dir, 'twice.wav');
});

test.after.always(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A world for one case, removed when the case ends however it ends; fails the case clearly without root. */
async function world(t: ExecutionContext, options: NatWorldOptions = {}): Promise<NatWorld | null> {
  if (!available) {
    t.fail('the NAT tests need root, iproute2 and iptables (ip netns); the CI machine has them');
    return null;
  }
  const w = await NatWorld.create(options);
  t.teardown(() => w.close());
  return w;
}

async function hangUp(t: ExecutionContext, w: NatWorld, page: import('playwright-core').Page, sessionId: string) {
  await page.locator('svc-agent').getByRole('button', { name: 'Hang up', exact: true }).click();
  await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 15_000, 'the session outcome');
  const call = await w.waitForCall(sessionId, (c) => c.ended_at !== null, 20_000, 'the call to end');
  t.not(call.status, 'failed', `the call ended without a failure (${call.termination_reason})`);
}

test.serial('baseline: a visitor on the server\'s own network (no NAT) talks with the demo agent over a host pair', async (t) => {
  t.timeout(150_000);
  const w = await world(t, { visitor: 'lan' });
  if (!w) return;
  await w.startServer();
  const { page } = await w.openVisitor(wavs.question!);
  await w.startConversation(page, 20);
  const c = await converse(page);
  t.is(c.question, 'What is your name?');
  t.regex(c.answer, /Ada/);
  t.true(c.botVolume > 0.01, 'the bot is heard at the page');
  const pair = await selectedPair(page);
  t.like(pair, { connectionState: 'connected', remote: { address: w.hosts.server.address } });
  t.log(`selected pair: ${JSON.stringify(pair)}`);
  await hangUp(t, w, page, c.sessionId);
});

test.serial('nothing configured: behind NAT to a 1:1 NATed server there is no media path; ice_failed within the setup timeout, the call record failed with ice_failed', async (t) => {
  t.timeout(120_000);
  const w = await world(t);
  if (!w) return;
  await w.startServer();
  const { page } = await w.openVisitor(wavs.question!);
  const clicked = Date.now();
  await w.startConversation(page, CONNECT_TIMEOUT_S);
  // What ICE tried, read while it tries (the widget closes its peer connection when it gives up).
  let pairs: Awaited<ReturnType<typeof candidatePairs>> = [];
  const watching = (async () => {
    while (!(await events(page, 'SvcSessionOutcome')).length && Date.now() - clicked < (CONNECT_TIMEOUT_S + 20) * 1000) {
      const now = await candidatePairs(page);
      if (now.length) pairs = now;
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  const outcome = await connectOutcome(page, (CONNECT_TIMEOUT_S + 20) * 1000);
  const waited = Date.now() - clicked;
  await watching;
  t.like(outcome.detail, { outcome: 'ice_failed', phase: 'connect' });
  t.true(waited < (CONNECT_TIMEOUT_S + 5) * 1000, `reported within the setup timeout (${waited} ms after the click)`);
  // The page tried: checks went out towards the server's candidates and none came back.
  t.log(`candidate pairs: ${JSON.stringify(pairs)}`);
  t.true(pairs.some((p) => p.requestsSent > 0), 'the browser sent connectivity checks');
  t.false(pairs.some((p) => p.responsesReceived > 0), 'no check was answered');
  t.false(pairs.some((p) => p.remote.includes(SERVER_PUBLIC)), 'the server never named its public address');
  const sessionId = outcome.detail.sessionId as string;
  const call = await w.waitForCall(sessionId, (c) => c.ended_at !== null, 20_000, 'the failed call');
  t.like(call, { status: 'failed', termination_reason: 'ice_failed', failure_reason: 'ice_failed' });
  t.is((await w.calls()).length, 1);
  t.false((await events(page)).some((e) => e.name === 'ReceivedTranscriptTurn'), 'no conversation happened');
});

test.serial('SVC_RTC_ANNOUNCED_ADDRESS and a port range: a whole conversation over a direct pair to the announced address; every UDP socket of the server in SVC_RTC_PORT_MIN..MAX', async (t) => {
  t.timeout(150_000);
  const w = await world(t);
  if (!w) return;
  const server = await w.startServer({ SVC_RTC_ANNOUNCED_ADDRESS: SERVER_PUBLIC, SVC_RTC_PORT_MIN: String(PORTS.min), SVC_RTC_PORT_MAX: String(PORTS.max) });
  const { page } = await w.openVisitor(wavs.question!);
  await w.startConversation(page, 20);
  const connected = await connectOutcome(page);
  t.is(connected.detail.outcome, 'success', JSON.stringify(connected.detail));
  if (connected.detail.outcome !== 'success') return;

  // The server's sockets while its peer connection is up (the bots run in the server's process).
  const sockets = await w.serverUdpSockets();
  t.log(`server UDP sockets: ${sockets.map((s) => `${s.local} (pid ${s.pids.join(',')})`).join(', ')}`);
  const ours = sockets.filter((s) => s.pids.includes(server.process.pid));
  t.true(ours.length > 0, 'the server process has UDP sockets (its peer connection)');
  t.deepEqual(sockets.filter((s) => s.port < PORTS.min || s.port > PORTS.max).map((s) => s.local), [], `every UDP socket is in ${PORTS.min}-${PORTS.max}`);

  const c = await converse(page);
  t.is(c.question, 'What is your name?');
  t.regex(c.answer, /Ada/);
  t.true(c.botVolume > 0.01, 'the greeting is heard at the page');
  t.true(c.frames[1] > c.frames[0], 'video frames decode');
  const pair = (await selectedPair(page))!;
  t.log(`selected pair: ${JSON.stringify(pair)}`);
  t.is(pair.remote?.address, SERVER_PUBLIC, 'the browser talks to the announced address');
  t.true(['host', 'prflx'].includes(pair.remote!.type) && ['host', 'prflx'].includes(pair.local!.type), `a direct pair (${pair.local?.type} -> ${pair.remote?.type})`);
  t.true(pair.remote!.port >= PORTS.min && pair.remote!.port <= PORTS.max, `the server's port ${pair.remote!.port} is in the range (kept by the 1:1 NAT)`);
  await hangUp(t, w, page, c.sessionId);
});

/**
 * The visitor's network changes during the bot's answer; the call must survive it: frames resume,
 * the second question (spoken after the change) is heard and answered, still one call record.
 */
async function networkChangeCase(t: ExecutionContext, change: (w: NatWorld) => Promise<string>) {
  t.timeout(180_000);
  const w = await world(t);
  if (!w) return;
  await w.startServer({ SVC_RTC_ANNOUNCED_ADDRESS: SERVER_PUBLIC });
  const { page } = await w.openVisitor(wavs.twice!);
  await w.startConversation(page, 20);
  const connected = await connectOutcome(page);
  t.is(connected.detail.outcome, 'success', JSON.stringify(connected.detail));
  if (connected.detail.outcome !== 'success') return;
  const sessionId = connected.detail.sessionId as string;
  const first = await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'user', 40_000, 'the first question');
  // Mid-answer: the bot starts speaking its answer to the first question.
  await waitForEvent(page, (e) => e.name === 'botIsSpeaking' && e.detail.isSpeaking === true && e.at > first.at, 30_000, 'the answer starting');
  const before = (await selectedPair(page))!;
  const changedAt = await page.evaluate('performance.now()') as number;
  const what = await change(w);
  t.log(`${what}; pair before: ${JSON.stringify(before.local)} -> ${JSON.stringify(before.remote)}`);

  const frames = await framesAdvance(page, 50, 40_000).catch((err: Error) => err);
  const since = (await events(page)).filter((e) => e.at > changedAt && !/Volume$|Partial$/.test(e.name));
  t.log(`after the change: ${since.map((e) => `${Math.round(e.at - changedAt)} ms ${e.name} ${JSON.stringify(e.detail)}`).join('; ')}`);
  t.true(Array.isArray(frames), `video frames resume after the change: ${frames instanceof Error ? frames.message : frames.join(' -> ')}`);
  const second = await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'user' && e.at > changedAt, 40_000, 'the question asked after the change').catch((err: Error) => err);
  t.false(second instanceof Error, `the bot hears the visitor after the change${second instanceof Error ? `: ${second.message}` : ''}`);
  if (!(second instanceof Error)) await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'bot' && e.at > second.at, 30_000, 'the answer after the change');
  const after = await selectedPair(page);
  t.log(`pair after: ${JSON.stringify(after)}; remote ufrags per peer connection: ${JSON.stringify(await remoteUfrags(page))}`);
  t.is(after?.connectionState, 'connected');
  const outcomes = (await events(page, 'SvcSessionOutcome')).map((e) => `${e.detail.phase}:${e.detail.outcome}`);
  t.deepEqual(outcomes, ['connect:success'], 'the call did not end');
  const calls = await w.calls();
  t.is(calls.length, 1, 'one call record');
  t.is(calls[0]?.session_id, sessionId);
  t.is(calls[0]?.ended_at, null, 'still going');
  return outcomes.length === 1 ? { page, w, sessionId } : undefined;
}

test.serial('ICE restart: the visitor moves to a new address mid-answer; the conversation goes on over a new path, one call record', async (t) => {
  const done = await networkChangeCase(t, async (w) => `visitor moved to ${await w.moveVisitor()}`);
  if (!done) return;
  // The old path is gone with the old address: the media now runs on a new ICE session, either the
  // same peer connection restarted (a second remote ufrag) or, when the signalling socket died with
  // the old address (browsers keep it open), a new peer connection after the room client joined
  // again on a new socket with the same token.
  const ufrags = await remoteUfrags(done.page);
  const restarted = ufrags.length === 1 && new Set(ufrags[0]).size >= 2;
  const rejoined = ufrags.length >= 2;
  t.true(restarted || rejoined, `a new ICE session carries the media (${JSON.stringify(ufrags)})`);
  await hangUp(t, done.w, done.page, done.sessionId);
});

test.serial('a link flap (6 s down) mid-answer: the conversation goes on, one call record', async (t) => {
  const done = await networkChangeCase(t, async (w) => {
    await w.flapVisitor(6_000);
    return 'visitor link down for 6 s';
  });
  if (done) await hangUp(t, done.w, done.page, done.sessionId);
});
