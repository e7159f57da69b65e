/**
 * `<svc-agent>` in a real chromium when the server runs its sessions in LiveKit rooms: the widget
 * script as served, the Session API answering with the LiveKit URL and a join token, the widget
 * importing its LiveKit module (LiveKit's own browser SDK, `livekit-client`, built by the server
 * from the npm package) and joining with it; the bot in the room with @livekit/rtc-node. The
 * LiveKit server is the local fake speaking LiveKit's wire protocol with a small SFU
 * (test/fakes/livekit-server.ts); offline engines, the human-portrait face, real PostgreSQL, the
 * visitor's microphone is chromium's fake capture device playing espeak speech. Nothing of ours
 * is mocked and nothing leaves the machine. Time bounds only catch hangs.
 *
 * One chromium at a time (2-core machine): every test launches its own and closes it.
 */
import test, { type ExecutionContext } from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { dispose, Room } from '@livekit/rtc-node';
import { AccessToken } from 'livekit-server-sdk';
import { LIVEKIT_SESSION_TOPIC as WIDGET_TOPIC } from '../../clients/web/transport.ts';
import { rms } from '../../core/audio.ts';
import { WIDGET_VERSION } from '../../protocol/widget-version.ts';
import { LIVEKIT_SESSION_TOPIC } from '../../transports/livekit/livekit-bot-room.ts';
import { holdsWithin, until } from '../../testing/until.ts';
import { startLiveKitServerFake, type LiveKitServerFake } from '../fakes/livekit-server.ts';
import { recognise } from '../sessions/conversation-audio.ts';
import {
  clickButton,
  events,
  RECORD_EVENTS,
  speechWav,
  startCustomerSite,
  startWidgetServer,
  videoSnapshot,
  waitForEvent,
  widgetView,
  withBrowser,
  type CustomerSite,
  type RecordedEvent,
  type WidgetBrowser,
  type WidgetServer,
} from './harness.ts';

const GREETING = 'Hello, I am Ada.';
const MODULE_PATH = `/widget/${WIDGET_VERSION}/livekit-client.js`;

let fake: LiveKitServerFake;
let server: WidgetServer;
let site: CustomerSite;
let dir: string;
const wavs: Record<string, string> = {};

test.before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'svc-widget-livekit-'));
  fake = await startLiveKitServerFake();
  server = await startWidgetServer('widget_livekit', { livekit: fake });
  site = await startCustomerSite();
  wavs.silent = await speechWav([60_000], dir, 'silent.wav');
  // The question 12 s after the microphone opens (the click): after the greeting, which a loaded
  // machine has started as late as 8 s after the click (a question over it interrupts it: 'Hello,').
  wavs.question = await speechWav([12_000, 'What is your name?', 40_000], dir, 'question.wav');
});

test.after.always(async () => {
  await site?.close();
  await server?.stop();
  await fake?.close();
  await dispose(); // the LiveKit FFI runtime of the bot's rtc-node
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/**
 * Records what the page's audio element is given (the bot's track), for the offline recogniser. An
 * AudioWorklet copies every block on the audio thread and posts it to the page: a busy main thread
 * delays the blocks but loses none (the ScriptProcessor used before ran on the main thread and
 * dropped blocks under load: a CI run under a CPU hog recorded a greeting the recogniser could
 * not hear). The worklet is loaded when the page opens, so a track set later is recorded from its
 * first block (`__botAudio.loaded` says it is ready).
 */
const RECORD_BOT_AUDIO = `
(() => {
  const rec = window.__botAudio = { rate: 0, chunks: [], tracks: 0, loaded: false, error: null };
  const WORKLET = "registerProcessor('bot-audio-recorder', class extends AudioWorkletProcessor {" +
    "constructor() { super(); this.block = new Float32Array(2048); this.n = 0; }" +
    "process(inputs) { const ch = inputs[0] && inputs[0][0]; if (!ch) return true;" +
    "for (let i = 0; i < ch.length; i++) { this.block[this.n++] = ch[i];" +
    "if (this.n === this.block.length) { this.port.postMessage(this.block, [this.block.buffer]); this.block = new Float32Array(2048); this.n = 0; } }" +
    "return true; } });";
  // Suspended until the page's click allows sound; the module loads meanwhile.
  const ctx = new AudioContext();
  rec.rate = ctx.sampleRate;
  ctx.audioWorklet.addModule(URL.createObjectURL(new Blob([WORKLET], { type: 'text/javascript' })))
    .then(() => { rec.loaded = true; }, (e) => { rec.error = String(e); });
  const desc = Object.getOwnPropertyDescriptor(HTMLMediaElement.prototype, 'srcObject');
  let previous = null;
  Object.defineProperty(HTMLMediaElement.prototype, 'srcObject', {
    configurable: true, enumerable: desc.enumerable, get() { return desc.get.call(this); },
    set(value) {
      desc.set.call(this, value);
      const track = this instanceof HTMLAudioElement && value && value.getAudioTracks ? value.getAudioTracks()[0] : null;
      if (!track) return;
      if (!rec.loaded) { rec.error = rec.error || 'a track came before the recorder was loaded'; return; }
      if (previous) previous.disconnect();
      const node = new AudioWorkletNode(ctx, 'bot-audio-recorder');
      previous = node;
      rec.chunks = []; rec.tracks += 1;
      node.port.onmessage = (e) => { if (previous === node) rec.chunks.push(Array.from(e.data, (v) => Math.max(-32768, Math.min(32767, Math.round(v * 32767))))); };
      ctx.createMediaStreamSource(new MediaStream([track])).connect(node);
      node.connect(ctx.destination);
      void ctx.resume();
    },
  });
})();
`;

/** The page's peer connections (LiveKit's SDK keeps its own): their inbound audio statistics explain a recording. */
const KEEP_PEER_CONNECTIONS = `
(() => {
  const Native = window.RTCPeerConnection;
  window.__pcs = [];
  window.RTCPeerConnection = class extends Native { constructor(...args) { super(...args); window.__pcs.push(this); } };
})();
`;

/** What the page's WebRTC stack did with the bot's audio: packets, losses, concealment, jitter buffer. */
async function inboundAudioStats(page: Page): Promise<unknown[]> {
  return (await page.evaluate(`(async () => {
    const out = [];
    for (const pc of window.__pcs) {
      (await pc.getStats()).forEach((r) => {
        if (r.type !== 'inbound-rtp' || r.kind !== 'audio') return;
        out.push({ packetsReceived: r.packetsReceived, packetsLost: r.packetsLost, jitterMs: Math.round(r.jitter * 1000), totalSamplesReceived: r.totalSamplesReceived,
          concealedSamples: r.concealedSamples, silentConcealedSamples: r.silentConcealedSamples, concealmentEvents: r.concealmentEvents,
          insertedForDeceleration: r.insertedSamplesForDeceleration, removedForAcceleration: r.removedSamplesForAcceleration,
          jitterBufferMs: Math.round((1000 * r.jitterBufferDelay) / Math.max(1, r.jitterBufferEmittedCount)) });
      });
    }
    return out;
  })()`)) as unknown[];
}

async function botAudio(page: Page): Promise<{ pcm: Int16Array; rate: number; error: string | null }> {
  const rec = (await page.evaluate('({ rate: window.__botAudio.rate, samples: window.__botAudio.chunks.flat(), error: window.__botAudio.error })')) as { rate: number; samples: number[]; error: string | null };
  return { pcm: Int16Array.from(rec.samples), rate: rec.rate, error: rec.error };
}

/** The loud stretches of a recording (10 ms windows over an RMS of 0.02), as [start, end] ms: what a failed recognition heard. */
function loudSpans(pcm: Int16Array, rate: number): Array<[number, number]> {
  const win = Math.round(rate / 100);
  const spans: Array<[number, number]> = [];
  for (let i = 0; i + win <= pcm.length; i += win) {
    if (rms(pcm.subarray(i, i + win)) < 0.02) continue;
    const ms = Math.round((i / rate) * 1000);
    const last = spans.at(-1);
    if (last && ms - last[1] <= 10) last[1] = ms + 10;
    else spans.push([ms, ms + 10]);
  }
  return spans;
}

async function open(browser: WidgetBrowser, url: string, t: ExecutionContext): Promise<{ page: Page; requests: string[] }> {
  const page = await browser.context.newPage();
  const requests: string[] = [];
  page.on('pageerror', (e) => t.log(`page error: ${e.message}`));
  page.on('request', (r) => requests.push(r.url()));
  await page.addInitScript(RECORD_EVENTS);
  await page.addInitScript(RECORD_BOT_AUDIO);
  await page.addInitScript(KEEP_PEER_CONNECTIONS);
  await page.goto(url);
  await page.waitForFunction(() => customElements.get('svc-agent') !== undefined);
  return { page, requests };
}

/** The customer's own site on another origin, embedding the widget from the server. */
const customerPage = (agentId: string, extra = '') => site.page(agentId, server.url, { extra });

const callEnded = (agentId: string, sessionId: string, ms?: number) => server.callEnded(agentId, sessionId, ms);

/** The Session API's answers to the page (room_url, token), in order. */
function grants(page: Page): Array<{ room_url: string; token: string; session_id: string }> {
  const seen: Array<{ room_url: string; token: string; session_id: string }> = [];
  page.on('response', (res) => {
    if (res.url().endsWith('/v1/public/agents/connect') && res.status() === 200) void res.json().then((body) => seen.push(body), () => undefined);
  });
  return seen;
}

/** The visitor participant (identity `user-...`) of a room at the fake. */
const visitorIn = (room: string) => fake.inRoom(room).find((p) => p.identity.startsWith('user-'));

/** Everything that names a stuck step: the page's events, and what the fake saw of each participant of the page's room. */
async function whatHappened(page: Page, room: string | undefined): Promise<string> {
  const people = fake.participants.filter((p) => p.room === room).map((p) => ({
    id: p.identity, state: p.state, leftBy: p.leftBy, pub: p.publisherState, sub: p.subscriberState, tracks: p.tracks.map((tr) => `${tr.type} ${tr.sid}${tr.received ? ' received' : ''}`), forwarded: p.forwarded, media: p.media,
    requests: p.requests.filter((r) => r !== 'ping' && r !== 'pingReq' && r !== 'trickle').join(','), negotiations: p.negotiations,
    refusals: p.refusals, dropped: p.dropped, data: p.dataSent.length,
    // The last data packets the fake relayed from this participant: a stalled message names its side.
    lastData: p.dataSent.slice(-6).map((d) => `${d.kind} ${d.type}${d.topic ? ` ${d.topic}` : ''} ${d.bytes} B -> ${d.deliveredTo.join('+') || 'nobody'}`),
  }));
  const names = (await events(page)).map((e) => e.name);
  return `page events ${names.join(',')}; room ${room}: ${JSON.stringify(people)}`;
}

/** Connects the widget of `page` and returns the session id and the LiveKit room. */
async function connect(page: Page, seen: ReturnType<typeof grants>): Promise<{ sessionId: string; room: string }> {
  await clickButton(page, 'Start conversation');
  const connected = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'connect', 60_000, 'connect outcome');
  if (connected.detail.outcome !== 'success') {
    // Everything that names the stuck step: the outcome's detail (the widget's state), the
    // page's events, and what the fake saw of each participant of the page's room.
    const grant = seen.find((g) => g.session_id === connected.detail.sessionId);
    throw new Error(`connect: ${connected.detail.outcome} ${JSON.stringify(connected.detail)}; ${await whatHappened(page, grant ? roomOfToken(grant.token) : undefined)}`);
  }
  const grant = await until(async () => seen.find((g) => g.session_id === connected.detail.sessionId), { timeoutMs: 5_000, intervalMs: 50, what: 'the grant' });
  return { sessionId: connected.detail.sessionId, room: roomOfToken(grant.token) };
}

/** The room named by the `video.room` grant of the LiveKit token the page was given. */
function roomOfToken(token: string): string {
  return JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8')).video.room;
}

test.serial('the widget and the bot use the same data packet topic', (t) => {
  t.is(WIDGET_TOPIC, LIVEKIT_SESSION_TOPIC);
});

test.serial('a full conversation in a LiveKit room: the SDK loaded on demand, greeting heard, a question answered, transcripts, speaking states, video frames, hang-up and release', async (t) => {
  t.timeout(90_000); // 19 s on a quiet 2-core machine; bounded at about four times that
  const agentId = await server.agent({ behaviour: { greeting: GREETING } });
  await withBrowser({ microphone: wavs.question }, async (browser) => {
    const { page, requests } = await open(browser, customerPage(agentId), t);
    await page.waitForFunction(() => (document.querySelector('svc-agent') as HTMLElement).dataset.record === 'loaded');
    t.false(requests.some((u) => u.includes('livekit-client.js')), 'nothing of LiveKit is fetched before a call');
    let grant: { room_url: string; token: string; session_id: string } | undefined;
    page.on('response', (res) => {
      if (res.url().endsWith('/v1/public/agents/connect') && res.status() === 200) void res.json().then((body) => (grant = body), () => undefined);
    });
    await clickButton(page, 'Start conversation');
    const connected = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 60_000, 'connect outcome');
    if (connected.detail.outcome !== 'success') t.log(await whatHappened(page, grant ? roomOfToken(grant.token) : undefined));
    t.like(connected.detail, { outcome: 'success', phase: 'connect', faultDomain: 'unknown', agentId, httpStatus: 200, widgetVersion: WIDGET_VERSION });
    const sessionId = connected.detail.sessionId as string;
    t.truthy(grant);
    const room = roomOfToken(grant!.token);
    t.is(grant!.room_url, `${fake.url}/?room=${room}`, 'the Session API named the LiveKit server, and the room in its room_url');
    t.deepEqual(requests.filter((u) => u.includes('livekit-client.js')), [`${server.url}${MODULE_PATH}`], 'the LiveKit module, once, from beside the widget script');
    const visitor = fake.inRoom(room).find((p) => p.identity.startsWith('user-'));
    t.truthy(visitor, 'the page joined the LiveKit room');
    t.is(visitor!.query.sdk, 'js', 'with LiveKit\'s JavaScript SDK');

    // The greeting: its words are in the sound the page's audio element plays.
    const greetingTurn = await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'bot', 30_000, 'greeting turn');
    if (greetingTurn.detail.text !== GREETING) t.log(`the page's events (name, ms, state or text): ${JSON.stringify((await events(page)).filter((e) => !/Volume$/.test(e.name)).map((e) => [e.name, Math.round(e.at), e.detail?.botState ?? e.detail?.text ?? e.detail?.outcome ?? '']))}`);
    t.is(greetingTurn.detail.text, GREETING);
    // The greeting's sound has all arrived once the bot has stopped speaking (its state back to
    // listening) and the recording has been quiet for 600 ms after it (longer than the greeting's
    // pauses): the SFU and the jitter buffer take longer on a loaded machine, so no fixed wait.
    await until(async () => {
      const states = (await events(page)).filter((e) => e.name === 'UpdateBotState').map((e) => e.detail.botState as string);
      return states.includes('speaking') && states.at(-1) === 'listening';
    }, { timeoutMs: 30_000, intervalMs: 100, what: 'the bot listening after its greeting' });
    let heard = await botAudio(page);
    await holdsWithin(async () => {
      heard = await botAudio(page);
      const last = loudSpans(heard.pcm, heard.rate).at(-1);
      return last !== undefined && (heard.pcm.length / heard.rate) * 1000 - last[1] >= 600;
    }, { timeoutMs: 15_000, intervalMs: 100 });
    t.is(heard.error, null, 'the recorder took the bot\'s track');
    t.true(heard.pcm.length > heard.rate, `recorded ${heard.pcm.length} samples at ${heard.rate} Hz`);
    const words = await recognise(heard.pcm, heard.rate, [GREETING, 'What is your name?', 'Goodbye']);
    if (words.length !== 1 || words[0] !== GREETING) t.log(`recorded ${Math.round((heard.pcm.length / heard.rate) * 1000)} ms; loud at ${JSON.stringify(loudSpans(heard.pcm, heard.rate))}; inbound audio ${JSON.stringify(await inboundAudioStats(page))}`);
    t.deepEqual(words, [GREETING], 'the offline recogniser hears the greeting in the page\'s audio');
    const audio = await page.$eval('svc-agent', (el) => {
      const a = el.shadowRoot!.querySelector('audio')!;
      const stream = a.srcObject as MediaStream | null;
      return { paused: a.paused, muted: a.muted, tracks: stream?.getTracks().map((x) => `${x.kind}:${x.readyState}`) };
    });
    t.deepEqual(audio, { paused: false, muted: false, tracks: ['audio:live'] });

    // Video frames keep arriving.
    const frames1 = await videoSnapshot(page);
    let frames2 = frames1;
    await holdsWithin(async () => (frames2 = await videoSnapshot(page)).decoded > frames1.decoded + 10, { timeoutMs: 30_000, intervalMs: 100 });
    t.true(frames2.decoded > frames1.decoded + 10, `video frames keep arriving (${frames1.decoded} -> ${frames2.decoded})`);
    t.true(frames1.width > 0 && frames1.height > 0, `the avatar video has a size (${frames1.width}x${frames1.height})`);
    t.is((await widgetView(page)).video, 'on');

    // The question through the microphone (12 s after the click), its transcript and the answer.
    // A wait that times out says what the fake saw of the room (which side a message stalled on).
    const explained = async <T>(waiting: Promise<T>): Promise<T> => {
      try {
        return await waiting;
      } catch (error) {
        t.log(await whatHappened(page, room));
        throw error;
      }
    };
    const userTurn = await explained(waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'user', 40_000, 'user turn'));
    t.deepEqual(userTurn.detail, { owner: 'user', text: 'What is your name?', final: true });
    const answer = await explained(waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'bot' && e.detail.text !== GREETING, 40_000, 'answer turn'));
    t.regex(answer.detail.text, /assistant/i);
    await waitForEvent(page, (e) => e.name === 'LatencyReport', 10_000, 'latency report');
    const all = await events(page);
    t.deepEqual(all.filter((e) => e.name === 'botIsSpeaking').map((e) => e.detail.isSpeaking).slice(0, 4), [true, false, true, false], 'botIsSpeaking for the greeting and the answer');
    t.true(all.some((e) => e.name === 'ReceivedTranscriptUser' && e.detail.final && e.detail.text === 'What is your name?'));
    t.true(all.some((e) => e.name === 'ReceivedTranscriptBot'));
    t.true(all.some((e) => e.name === 'ReceivedTranscriptBotPartial'));
    t.true(all.some((e) => e.name === 'UserStartedSpeaking') && all.some((e) => e.name === 'UserStoppedSpeaking'));
    t.true(all.some((e) => e.name === 'botVolume' && e.detail.volume > 0.01), 'the bot is heard at the page (botVolume)');
    t.true(all.some((e) => e.name === 'userVolume' && e.detail.volume > 0.01), 'the microphone is heard (userVolume)');
    t.deepEqual(all.filter((e) => e.name === 'UpdateConnectionState').map((e) => e.detail.connectionState), ['requesting', 'connecting', 'connected', 'ready']);
    const botStates = all.filter((e) => e.name === 'UpdateBotState').map((e) => e.detail.botState);
    for (const s of ['initializing', 'listening', 'speaking', 'thinking']) t.true(botStates.includes(s), `botState ${s} seen: ${botStates.join(',')}`);
    const timing = all.find((e) => e.name === 'ConnectionTimingReport')!.detail;
    t.like(timing, { sessionId, agentId, connectAttempts: 1 });
    for (const mark of ['microphoneReady', 'connectRequest', 'connectResponse', 'signallingJoined', 'iceConnected', 'firstVideoFrame', 'botReady']) t.is(typeof timing.marks[mark], 'number', `mark ${mark}`);
    t.true(timing.marks.connectResponse <= timing.marks.signallingJoined && timing.marks.signallingJoined <= timing.marks.iceConnected);
    t.log(`connection timing (LiveKit, first call of the page: the module load is in signallingMs): ${JSON.stringify(timing.durations)}`);
    t.true(visitor!.dataSent.some((d) => d.topic === LIVEKIT_SESSION_TOPIC && d.kind === 'reliable'), 'the page sent session messages as reliable data packets');
    t.true(visitor!.tracks.some((tr) => tr.type === 'audio' && tr.received), 'the microphone track reached the SFU');

    // Hang-up: ended_by_visitor, the session released with the room the room_url names.
    const before = server.releases.length;
    await clickButton(page, 'Hang up');
    const ended = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'session outcome');
    t.like(ended.detail, { outcome: 'ended_by_visitor', faultDomain: 'unknown', sessionId });
    t.deepEqual((await events(page)).filter((e: RecordedEvent) => e.name === 'SvcSessionOutcome').map((e) => `${e.detail.phase}:${e.detail.outcome}`), ['connect:success', 'session:ended_by_visitor']);
    t.like(await widgetView(page), { view: 'ended', video: 'off' });
    await until(async () => server.releases.length > before, { timeoutMs: 10_000, intervalMs: 100, what: 'the release request' });
    t.is(server.releases.at(-1)!.room, room, 'released with the room the room_url names');
    const record = await callEnded(agentId, sessionId);
    t.true(['client_hung_up', 'client_released'].includes(record.termination_reason), record.termination_reason);
    t.is(record.metadata.room_provider, 'livekit');
    await until(async () => fake.inRoom(room).length === 0, { timeoutMs: 10_000, intervalMs: 100, what: 'the room to empty' });
    // The page sends its hang-up, waits until it is sent, then leaves (livekit-transport.ts); the
    // bot ends the session on the hang-up and the server deletes the room. Which reaches the SFU
    // first is a race both ways correct: on a quiet machine the page's LeaveRequest, with a CPU hog
    // beside the test (issue 23) sometimes the deletion.
    t.true(visitor!.leftBy === 'leave' || visitor!.leftBy === 'room_deleted', `the page left the room or the room ended under it (${visitor!.leftBy})`);
  });
});

test.serial('the LiveKit module fails to load: connection_failed (ojin), the admitted session is released; "Try again" loads it and connects; closing the tab releases with a beacon', async (t) => {
  const agentId = await server.agent({ behaviour: { greeting: GREETING } });
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const { page } = await open(browser, customerPage(agentId), t);
    const seen = grants(page);
    await page.route(`**${MODULE_PATH}`, (route) => route.fulfill({ status: 503, body: 'unavailable' }));
    const before = server.releases.length;
    await clickButton(page, 'Start conversation');
    const failed = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 30_000, 'outcome');
    t.like(failed.detail, { outcome: 'connection_failed', phase: 'connect', faultDomain: 'ojin', httpStatus: 200 });
    t.like(await widgetView(page), { view: 'error', status: 'The connection could not be set up. Please try again.' });
    await until(async () => server.releases.length > before, { timeoutMs: 10_000, intervalMs: 100, what: 'the release request' });
    t.is(server.releases.at(-1)!.room, roomOfToken(seen[0]!.token), 'the session admitted for it is released');
    t.is((await callEnded(agentId, failed.detail.sessionId)).termination_reason, 'client_released');

    await page.unroute(`**${MODULE_PATH}`);
    await clickButton(page, 'Try again');
    const retried = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.outcome === 'success', 60_000, 'retry connects');
    const room = roomOfToken(seen.find((g) => g.session_id === retried.detail.sessionId)!.token);
    t.truthy(visitorIn(room), 'in the LiveKit room');

    const beforeClose = server.releases.length;
    await page.close({ runBeforeUnload: true });
    const record = await callEnded(agentId, retried.detail.sessionId, 15_000);
    t.true(['client_hung_up', 'client_released'].includes(record.termination_reason), `ended by the page going away (${record.termination_reason})`);
    await until(async () => server.releases.length > beforeClose, { timeoutMs: 10_000, intervalMs: 100, what: 'the release request' });
    t.like(server.releases.at(-1), { room, mode: 'no-cors' }, 'released with navigator.sendBeacon, the room of the token');
  });
});

test.serial('the demo page at / in a LiveKit deployment; the server ends the session (session_limit_seconds): time_limit_reached over a data packet, nothing to release', async (t) => {
  // The limit counts from admission (docs/session-messages.md), so it must outlast the connect: the first
  // LiveKit call of a page loads the SDK module, 2.2 s on a quiet machine and over 4 s in a loaded CI run,
  // where a 4 s limit ended the session before the page had connected (connect outcome time_limit_reached).
  const agentId = await server.agent({ session_limit_seconds: 12, behaviour: { greeting: GREETING } });
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const { page } = await open(browser, `${server.url}/?agent_id=${agentId}`, t);
    const seen = grants(page);
    const before = server.releases.length;
    const { sessionId, room } = await connect(page, seen);
    const ended = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 30_000, 'session end');
    t.like(ended.detail, { outcome: 'time_limit_reached', faultDomain: 'unknown', sessionId });
    t.like(await widgetView(page), { view: 'ended', status: 'The conversation reached its time limit.' });
    t.is((await callEnded(agentId, sessionId)).termination_reason, 'session_limit_reached');
    t.is(server.releases.length, before, 'no release for a session the server ended');
    await until(async () => fake.inRoom(room).length === 0, { timeoutMs: 10_000, intervalMs: 100, what: 'the room to empty' });
    t.is((await events(page)).filter((e) => e.name === 'UpdateBotState').at(-1)!.detail.botState, 'ended');
  });
});

test.serial('the LiveKit room is deleted under the page (no session-ended): ended_by_agent, nothing to release', async (t) => {
  const agentId = await server.agent({ behaviour: { greeting: GREETING } });
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const { page } = await open(browser, customerPage(agentId), t);
    const seen = grants(page);
    const before = server.releases.length;
    const { sessionId, room } = await connect(page, seen);
    t.true((await fake.deleteRoom(room)) >= 2, 'the page and the bot are removed (LeaveRequest ROOM_DELETED)');
    const ended = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 15_000, 'session end');
    t.like(ended.detail, { outcome: 'ended_by_agent', faultDomain: 'unknown', sessionId });
    t.is((await widgetView(page)).view, 'ended');
    const record = await callEnded(agentId, sessionId);
    t.log(`the server ended the session with ${record.termination_reason}`);
    t.is(server.releases.length, before, 'the room was closed by the server: nothing to release');
  });
});

test.serial('another participant of the room is not listened to: its session-ended, bot states and tool calls on the session topic change nothing', async (t) => {
  const agentId = await server.agent({ behaviour: { greeting: GREETING } });
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const { page } = await open(browser, customerPage(agentId), t);
    const seen = grants(page);
    const { room } = await connect(page, seen);
    // Someone else in the room (a token for it, from whoever holds the LiveKit keys).
    const at = new AccessToken(fake.apiKey, fake.apiSecret, { identity: 'stranger', ttl: 600 });
    at.addGrant({ roomJoin: true, room, canPublishData: true });
    const stranger = new Room();
    await stranger.connect(fake.url, await at.toJwt(), { autoSubscribe: false, dynacast: false });
    t.teardown(() => stranger.disconnect());
    await until(async () => fake.inRoom(room).some((p) => p.identity === 'stranger'), { timeoutMs: 10_000, intervalMs: 50, what: 'the stranger in the room' });
    const before = (await events(page)).length;
    for (const message of [
      { type: 'bot-state', state: 'speaking' },
      { type: 'tool-call', tool_call_id: 'x1', function_name: 'open_page', arguments: '{"page":"https://evil.example"}' },
      { type: 'session-ended', reason: 'agent_ended' },
    ]) {
      await stranger.localParticipant!.publishData(new TextEncoder().encode(JSON.stringify(message)), { reliable: true, topic: LIVEKIT_SESSION_TOPIC });
    }
    // They reached the page (the fake forwards them as LiveKit does), and nothing happens for a
    // while (the bot's own messages pass: see the full conversation test).
    await until(async () => {
      const sent = fake.participants.find((p) => p.identity === 'stranger' && p.room === room)?.dataSent.filter((d) => d.topic === LIVEKIT_SESSION_TOPIC) ?? [];
      return sent.length === 3 && sent.every((d) => d.deliveredTo.some((to) => to.startsWith('user-')));
    }, { timeoutMs: 10_000, intervalMs: 50, what: 'the stranger\'s packets delivered to the page' });
    await holdsWithin(async () => (await events(page)).slice(before).some((e) => e.name === 'SvcSessionOutcome' || e.name === 'svcToolCall' || (e.name === 'UpdateBotState' && e.detail.botState === 'speaking')), { timeoutMs: 3_000, intervalMs: 100 });
    const after = (await events(page)).slice(before);
    t.false(after.some((e) => e.name === 'SvcSessionOutcome'), 'the call goes on');
    t.false(after.some((e) => e.name === 'svcToolCall'), 'no tool call reached the page');
    t.not((await widgetView(page)).view, 'ended');
    await clickButton(page, 'Hang up');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'ended');
  });
});

test.serial('the signalling socket drops and LiveKit rejoins within the grace: the call goes on (no outcome), client-ready again, the bot still answers', async (t) => {
  t.timeout(90_000); // 19 s on a quiet 2-core machine; bounded at about four times that
  const agentId = await server.agent({ behaviour: { greeting: GREETING } });
  await withBrowser({ microphone: wavs.question }, async (browser) => {
    const { page } = await open(browser, customerPage(agentId), t);
    const seen = grants(page);
    const { sessionId, room } = await connect(page, seen);
    const first = visitorIn(room)!;
    await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'bot', 30_000, 'greeting turn');
    t.is(await fake.dropSignal(first.identity), 1);
    // The SDK's resume is refused (the fake forgot the participant, as LiveKit answers then) and it joins again.
    const again = await until(async () => fake.inRoom(room).find((p) => p.identity === first.identity && p.sid !== first.sid && p.tracks.some((tr) => tr.received)), { timeoutMs: 15_000, intervalMs: 100, what: 'the page to join again' });
    t.true(fake.resumesRefused.includes(first.identity), 'the SDK tried to resume first');
    await until(async () => again.dataSent.some((d) => d.topic === LIVEKIT_SESSION_TOPIC), { timeoutMs: 10_000, intervalMs: 100, what: 'client-ready again, on the new connection' });
    // The question (12 s after the click) is heard over the new connection and answered.
    const answer = await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'bot' && e.detail.text !== GREETING, 45_000, 'answer turn');
    t.regex(answer.detail.text, /assistant/i);
    const frames1 = await videoSnapshot(page);
    await until(async () => (await videoSnapshot(page)).decoded > frames1.decoded + 5, { timeoutMs: 15_000, intervalMs: 100, what: 'video frames after the rejoin' });
    t.deepEqual((await events(page)).filter((e) => e.name === 'SvcSessionOutcome').map((e) => `${e.detail.phase}:${e.detail.outcome}`), ['connect:success'], 'the call was never ended');
    await clickButton(page, 'Hang up');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'hang-up');
    t.true(['client_hung_up', 'client_released'].includes((await callEnded(agentId, sessionId)).termination_reason));
  });
});

test.serial('the network to the LiveKit server is cut during a call: the SDK tries to resume, the 8 s grace passes, transport_lost; the widget releases the session', async (t) => {
  const agentId = await server.agent({ behaviour: { greeting: GREETING } });
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const { page } = await open(browser, customerPage(agentId), t);
    const seen = grants(page);
    const { sessionId, room } = await connect(page, seen);
    const identity = visitorIn(room)!.identity;
    t.teardown(() => fake.restore(identity));
    const before = server.releases.length;
    const cutAt = await page.evaluate(() => performance.now());
    t.is(await fake.cutOff(identity), 1);
    const lost = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 30_000, 'transport lost');
    t.like(lost.detail, { outcome: 'transport_lost', faultDomain: 'unknown', sessionId });
    t.true(lost.at - cutAt >= 7_500, `ended ${Math.round(lost.at - cutAt)} ms after the cut (the grace)`);
    t.true(fake.droppedWhileCut.some((d) => d.includes('(resume)')), `the SDK tried to resume meanwhile: ${fake.droppedWhileCut.join(', ')}`);
    const view = await widgetView(page);
    t.like(view, { view: 'error', status: 'The connection was lost.' });
    t.deepEqual(view.buttons, ['Try again']);
    await until(async () => server.releases.length > before, { timeoutMs: 10_000, intervalMs: 100, what: 'the release request' });
    t.like(server.releases.at(-1), { room, mode: 'cors' });
    const record = await callEnded(agentId, sessionId, 15_000);
    t.true(['client_released', 'client_left'].includes(record.termination_reason), record.termination_reason);
  });
});
