/**
 * Issue 27 across a real NAT, through coturn (test/support/coturn.ts, nat-world.ts): the visitor's
 * chromium behind a masquerading home router, the server (`npm start`) behind a 1:1 NAT, coturn
 * on the public segment in shared-secret mode, the server given `SVC_TURN_SECRET` and
 * `SVC_TURN_URLS` (no announced address: without the relay there is no path). The cases:
 *
 * - direct UDP between the two sides dropped at both routers: the conversation goes through the
 *   relay, with a credential minted for this session (checked against coturn's secret);
 * - `SVC_ICE_TRANSPORT_POLICY=relay`: relayed candidates only, on both sides;
 * - every UDP packet dropped at the home router: TURN over TCP carries the call;
 * - the server configured with a secret coturn does not know: refused by coturn (401), reported
 *   as `ice_failed` (fault domain `ojin`: the service's side) within the timeout, nothing hangs;
 * - credentials against coturn directly (a TURN Allocate from the visitor's network): a valid
 *   one is granted, an expired one and one made with another secret are refused.
 *
 * Needs root, iproute2, iptables, coturn and chromium: fails (not skips) without them.
 */
import test, { type ExecutionContext } from 'ava';
import { execFileSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { turnAllocate, turnCredential } from '../support/coturn.ts';
import { canMakeTestHosts } from '../support/netns.ts';
import { connectOutcome, converse, NatWorld, peerConnectionConfigs, selectedPair, TURN_ADDRESS } from '../support/nat-world.ts';
import { events, waitForEvent, speechWav } from '../widget/browser.ts';

const available = (await canMakeTestHosts()) && hasCoturn();
const CONNECT_TIMEOUT_S = 8;
let dir: string;
let question: string;

function hasCoturn(): boolean {
  try {
    execFileSync('sh', ['-c', 'command -v turnserver'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

test.before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'svc-nat-turn-'));
  question = await speechWav([9_000, 'What is your name?', 40_000], dir, 'question.wav');
});

test.after.always(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** A world with coturn for one case, removed when the case ends; fails the case clearly when the machine cannot make one. */
async function world(t: ExecutionContext): Promise<NatWorld | null> {
  if (!available) {
    t.fail('the NAT tests need root, iproute2, iptables (ip netns) and coturn (turnserver; scripts/prepare-test-machine.sh installs it)');
    return null;
  }
  const w = await NatWorld.create({ turn: true });
  t.teardown(() => w.close());
  return w;
}

/** The service's TURN settings for this world's coturn (UDP and TCP URLs). */
const turnEnv = (w: NatWorld, secret = w.coturn!.secret) => ({ SVC_TURN_SECRET: secret, SVC_TURN_URLS: `${w.coturn!.urls.udp},${w.coturn!.urls.tcp}` });

/** Successful TURN allocations in coturn's log. */
const allocations = (w: NatWorld) => (w.coturn!.log.match(/incoming packet ALLOCATE processed, success/g) ?? []).length;

async function hangUp(t: ExecutionContext, w: NatWorld, page: Page, sessionId: string) {
  await page.locator('svc-agent').getByRole('button', { name: 'Hang up', exact: true }).click();
  await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 15_000, 'the session outcome');
  const call = await w.waitForCall(sessionId, (c) => c.ended_at !== null, 20_000, 'the call to end');
  t.not(call.status, 'failed', `the call ended without a failure (${call.termination_reason})`);
}

/** The TURN entry the page's peer connection was given: a credential of coturn's shared-secret mode, minted for this session. */
async function assertMintedCredential(t: ExecutionContext, w: NatWorld, page: Page) {
  const configs = await peerConnectionConfigs(page);
  t.is(configs.length, 1, 'one peer connection');
  const turn = (configs[0]?.iceServers ?? []).find((s) => [s.urls].flat().some((u) => u.startsWith('turn:')));
  if (!turn) {
    t.fail(`the page got no TURN server: ${JSON.stringify(configs)}`);
    return;
  }
  t.deepEqual([turn.urls].flat().sort(), [w.coturn!.urls.tcp, w.coturn!.urls.udp].sort());
  const username = String(turn.username);
  t.regex(username, /^\d+:\S+$/, 'username <expiry>:<id>');
  const expiry = Number(username.split(':')[0]);
  const now = Date.now() / 1000;
  t.true(expiry > now && expiry < now + 2 * 3600, `expires with the session (in ${Math.round(expiry - now)} s)`);
  t.is(turn.credential, createHmac('sha1', w.coturn!.secret).update(username).digest('base64'), 'HMAC-SHA1 of the username with the shared secret');
}

test.serial('TURN over UDP, direct UDP dropped between the sides: the conversation goes through the relay with a per-session credential', async (t) => {
  t.timeout(150_000);
  const w = await world(t);
  if (!w) return;
  await w.blockDirectUdp();
  await w.startServer(turnEnv(w));
  const { page } = await w.openVisitor(question);
  await w.startConversation(page, 20);
  const c = await converse(page);
  t.is(c.question, 'What is your name?');
  t.regex(c.answer, /Ada/);
  t.true(c.botVolume > 0.01, 'the greeting is heard at the page');
  const pair = (await selectedPair(page))!;
  t.log(`selected pair: ${JSON.stringify(pair)}`);
  t.true(pair.local?.type === 'relay' || pair.remote?.type === 'relay', `relayed (${pair.local?.type} -> ${pair.remote?.type})`);
  t.true(pair.local?.address === TURN_ADDRESS || pair.remote?.address === TURN_ADDRESS, 'through coturn');
  await assertMintedCredential(t, w, page);
  t.true(allocations(w) >= 1, 'coturn granted allocations');
  const dropped = (await w.droppedPackets('home')) + (await w.droppedPackets('cloud'));
  t.log(`direct UDP packets dropped at the routers: ${dropped}; coturn allocations: ${allocations(w)}`);
  t.true(dropped > 0, 'direct attempts were made and dropped (the filter was in the way)');
  await hangUp(t, w, page, c.sessionId);
});

test.serial('SVC_ICE_TRANSPORT_POLICY=relay: both sides use relayed candidates only', async (t) => {
  t.timeout(150_000);
  const w = await world(t);
  if (!w) return;
  await w.startServer({ ...turnEnv(w), SVC_ICE_TRANSPORT_POLICY: 'relay' });
  const { page } = await w.openVisitor(question);
  await w.startConversation(page, 20);
  const c = await converse(page);
  t.regex(c.answer, /Ada/);
  const pair = (await selectedPair(page))!;
  t.log(`selected pair: ${JSON.stringify(pair)}`);
  t.like(pair, { local: { type: 'relay' }, remote: { type: 'relay', address: TURN_ADDRESS } });
  t.is((await peerConnectionConfigs(page))[0]?.iceTransportPolicy, 'relay', 'the page was told the policy');
  t.true(allocations(w) >= 2, `both sides allocated on coturn (${allocations(w)})`);
  await hangUp(t, w, page, c.sessionId);
});

test.serial('TURN over TCP: every UDP packet dropped at the home router, the call still works (relayed over TCP)', async (t) => {
  t.timeout(150_000);
  const w = await world(t);
  if (!w) return;
  await w.dropAllUdpAtHome();
  await w.startServer(turnEnv(w));
  const { page } = await w.openVisitor(question);
  await w.startConversation(page, 20);
  const c = await converse(page);
  t.regex(c.answer, /Ada/);
  t.true(c.frames[1] > c.frames[0], 'video frames decode');
  const pair = (await selectedPair(page))!;
  t.log(`selected pair: ${JSON.stringify(pair)}`);
  t.like(pair, { local: { type: 'relay', relayProtocol: 'tcp', address: TURN_ADDRESS } });
  t.true((await w.droppedPackets('home')) > 0, 'the visitor did try UDP (dropped)');
  await hangUp(t, w, page, c.sessionId);
});

test.serial('a TURN secret coturn does not know: refused (401), ice_failed within the setup timeout (fault: ojin), the call record failed, nothing hangs', async (t) => {
  t.timeout(120_000);
  const w = await world(t);
  if (!w) return;
  await w.blockDirectUdp();
  await w.startServer(turnEnv(w, 'a-secret-coturn-was-never-given'));
  const { page } = await w.openVisitor(question);
  const clicked = Date.now();
  await w.startConversation(page, CONNECT_TIMEOUT_S);
  const outcome = await connectOutcome(page, (CONNECT_TIMEOUT_S + 20) * 1000);
  const waited = Date.now() - clicked;
  t.like(outcome.detail, { outcome: 'ice_failed', phase: 'connect', faultDomain: 'ojin' });
  t.true(waited < (CONNECT_TIMEOUT_S + 5) * 1000, `reported within the setup timeout (${waited} ms after the click)`);
  t.is(allocations(w), 0, 'coturn granted nothing');
  t.regex(w.coturn!.log, /check_stun_auth: Cannot find credentials of user <\d+:/, 'coturn refused the minted credentials');
  const call = await w.waitForCall(outcome.detail.sessionId, (c) => c.ended_at !== null, 20_000, 'the failed call');
  t.like(call, { status: 'failed', termination_reason: 'ice_failed', failure_reason: 'ice_failed' });
  t.false((await events(page)).some((e) => e.name === 'ReceivedTranscriptTurn'), 'no conversation happened');
});

test.serial('credentials against coturn directly, from the visitor\'s network: valid granted; expired, or made with another secret, refused', async (t) => {
  t.timeout(60_000);
  const w = await world(t);
  if (!w) return;
  const coturn = w.coturn!;
  const visitor = w.hosts.visitor;
  const started = Date.now();
  const valid = await turnAllocate(visitor, coturn, coturn.credential(600, 'replay-check'));
  t.like(valid, { ok: true }, 'a current credential is granted (the client works)');
  t.regex(valid.ok ? valid.relayed : '', new RegExp(`^${TURN_ADDRESS.replace(/\./g, '\\.')}:50\\d{3}$`), 'a relayed address in coturn\'s range');
  // A credential minted for a session that has ended (its expiry passed), replayed.
  const expired = coturn.credential(-120, 'replay-check');
  t.deepEqual(await turnAllocate(visitor, coturn, expired), { ok: false, code: 401, reason: 'Unauthorized' }, 'an expired credential is refused');
  t.deepEqual(await turnAllocate(visitor, coturn, turnCredential('a-secret-coturn-was-never-given', 600)), { ok: false, code: 401, reason: 'Unauthorized' }, 'another secret is refused');
  t.deepEqual(await turnAllocate(visitor, coturn, { username: expired.username, credential: coturn.credential(600).credential }), { ok: false, code: 401, reason: 'Unauthorized' }, 'a username changed without its credential is refused');
  t.true(Date.now() - started < 20_000, 'every answer came at once (nothing waits for a timeout)');
  t.regex(coturn.log, new RegExp(`Cannot find credentials of user <${expired.username}>`));
});
