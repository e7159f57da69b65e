/**
 * `<svc-agent>` in a real chromium against the real server: the widget script as served, the
 * Session API admitting and releasing sessions, the BotRunner with the offline engines (espeak
 * TTS, phrase STT, WebRTC VAD, rule-based responder) and the human-portrait face over embedded
 * WebRTC. The visitor's microphone is chromium's fake capture device playing a WAV spoken by
 * espeak. Nothing of ours is mocked. Time bounds only catch hangs; no timing goal is asserted.
 *
 * One chromium at a time (2-core machine): every test launches its own and closes it.
 */
import test, { type ExecutionContext } from 'ava';
import { mkdtempSync, rmSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { WIDGET_VERSION } from '../../protocol/widget-version.ts';
import { LocalTTSService } from '../../plugins/local/index.ts';
import { createCapacityGate } from '../../server/capacity/index.ts';
import { mintConnectToken } from '../../server/sessions/connect-auth.ts';
import { holdsWithin, until } from '../../testing/until.ts';
import {
  clickButton,
  events,
  OBSERVE_MICROPHONE,
  RECORD_EVENTS,
  speechWav,
  startCustomerSite,
  startWidgetServer,
  TOOL_PHRASE,
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
const LONG_GREETING = 'Hello, I am Ada, your guide for this demonstration. I can tell you about our plans, our opening hours, the team behind the product, and how to get started in a few minutes.';
const ELEMENT_EVENT_NAMES = [
  'botIsSpeaking', 'ReceivedTranscriptTurn', 'ReceivedTranscriptUser', 'ReceivedTranscriptBot', 'ReceivedTranscriptBotPartial', 'BotTtsStopped', 'BotPaused', 'BotResumed', 'BotInterrupted',
  'UserStartedSpeaking', 'UserStoppedSpeaking', 'ConnectionTimeout', 'UpdateBotState', 'UpdateConnectionState', 'UpdateQueuing',
  'userSpeakingChanged', 'userVolume', 'botVolume',
];
const WINDOW_EVENT_NAMES = ['svcToolCall', 'LatencyReport', 'ConnectionTimingReport', 'SvcSessionOutcome'];

let server: WidgetServer;
let site: CustomerSite;
let dir: string;
const wavs: Record<string, string> = {};

test.before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'svc-widget-test-'));
  server = await startWidgetServer('widget_browser');
  site = await startCustomerSite();
  // The fake microphone plays these from the moment the widget opens it (the start click).
  wavs.silent = await speechWav([60_000], dir, 'silent.wav');
  wavs.question = await speechWav([9_000, 'What is your name?', 40_000], dir, 'question.wav');
  wavs.bargeIn = await speechWav([7_000, 'What is your name?', 40_000], dir, 'barge-in.wav');
  wavs.tool = await speechWav([6_000, TOOL_PHRASE, 40_000], dir, 'tool.wav');
  wavs.loop = await speechWav([9_000, 'What is your name?', 9_000], dir, 'loop.wav');
  wavs.twice = await speechWav([9_000, 'What is your name?', 14_000, 'What is your name?', 40_000], dir, 'twice.wav');
});

test.after.always(async () => {
  await site?.close();
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The customer's own site on another origin: a page that embeds the widget from the server, and an image for the agent preview. */
async function open(browser: WidgetBrowser, url: string, t: ExecutionContext): Promise<Page> {
  const page = await browser.context.newPage();
  page.on('pageerror', (e) => t.log(`page error: ${e.message}`));
  await page.addInitScript(RECORD_EVENTS);
  await page.addInitScript(OBSERVE_MICROPHONE);
  await page.goto(url);
  await page.waitForFunction(() => customElements.get('svc-agent') !== undefined);
  return page;
}

const customerPage = (agentId: string, params: Record<string, string> = {}) => site.page(agentId, server.url, params);

const callRecord = (agentId: string, sessionId: string) => server.callRecord(agentId, sessionId);
const callEnded = (agentId: string, sessionId: string, ms?: number) => server.callEnded(agentId, sessionId, ms);

function outcomes(all: RecordedEvent[]) {
  return all.filter((e) => e.name === 'SvcSessionOutcome').map((e) => e.detail);
}

/** Spec rule: the four window events on window only; everything else on the element, bubbling and composed. */
function assertTargets(t: ExecutionContext, all: RecordedEvent[], elementIds: readonly string[] = ['one', 'agent']) {
  for (const e of all) {
    t.true(e.isCustom, `${e.name} is a CustomEvent`);
    if (WINDOW_EVENT_NAMES.includes(e.name)) t.is(e.target, 'window', `${e.name} is dispatched on window`);
    else {
      t.true(ELEMENT_EVENT_NAMES.includes(e.name), `known event ${e.name}`);
      t.true(elementIds.includes(e.target), `${e.name} is dispatched on the element (got ${e.target})`);
      t.true(e.bubbles && e.composed, `${e.name} bubbles and is composed`);
    }
  }
}

/** The outcome detail has exactly the spec's keys (sessionId only once a session exists). */
function assertOutcomeShape(t: ExecutionContext, d: any, hasSession: boolean) {
  const keys = ['outcome', 'phase', 'faultDomain', 'agentId', 'instanceId', 'httpStatus', 'elapsedMs', 'widgetVersion', ...(hasSession ? ['sessionId'] : [])];
  t.deepEqual(Object.keys(d).sort(), keys.sort());
  t.true(['connect', 'session'].includes(d.phase));
  t.true(['client_env', 'ojin', 'backend', 'unknown'].includes(d.faultDomain));
  t.is(d.widgetVersion, WIDGET_VERSION);
  t.regex(d.instanceId, /^[0-9a-f-]{36}$/);
  t.true(Number.isInteger(d.elapsedMs) && d.elapsedMs >= 0);
}

test.serial('before the call: the public record gives the title and preview; the page embeds the widget from another origin', async (t) => {
  const agentId = await server.agent({ title: 'Ada from Acme', preview_url: `${site.url}/preview.png` });
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const page = await open(browser, customerPage(agentId), t);
    await page.waitForFunction(() => (document.querySelector('svc-agent') as HTMLElement).dataset.record === 'loaded');
    const view = await widgetView(page);
    t.is(view.title, 'Ada from Acme');
    t.is(view.previewSrc, `${site.url}/preview.png`);
    t.is(view.view, 'idle');
    t.deepEqual(view.buttons, ['Start conversation']);
    const shown = await page.$eval('svc-agent', (el) => {
      const img = el.shadowRoot!.querySelector('.preview') as HTMLImageElement;
      return { loaded: img.complete && img.naturalWidth === 320, visible: getComputedStyle(img).display !== 'none' && getComputedStyle(img).visibility !== 'hidden' };
    });
    t.deepEqual(shown, { loaded: true, visible: true }, 'the preview image is shown');
    t.is(await page.evaluate('typeof window.SvcRoom'), 'undefined', 'the bundled room client defines nothing on the page');
    t.deepEqual(await events(page), [], 'no events before the visitor acts');

    // The connect request is held in the browser (as a slow network would) until the connecting view was checked.
    let letThrough!: () => void;
    const held = new Promise<void>((resolve) => (letThrough = resolve));
    await page.route(`${server.url}/v1/public/agents/connect`, async (route) => {
      await held;
      await route.continue();
    });
    // Keyboard: the start button is reachable with Tab and works with Enter.
    await page.keyboard.press('Tab');
    t.is(await page.evaluate(() => (document.activeElement?.shadowRoot?.activeElement as HTMLElement | null)?.textContent), 'Start conversation');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => (document.querySelector('svc-agent')!.shadowRoot!.querySelector('.card') as HTMLElement).dataset.view === 'connecting');
    const connecting = await widgetView(page);
    t.like(connecting, { view: 'connecting', status: 'Connecting…', video: 'off', previewSrc: `${site.url}/preview.png` });
    t.deepEqual(connecting.buttons, ['Cancel']);
    await screenshot(page, 'docs/media/widget-connecting.png');
    letThrough();
    const ok = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 40_000, 'connect outcome');
    t.like(ok.detail, { outcome: 'success', phase: 'connect', faultDomain: 'unknown', agentId, httpStatus: 200 });
    // The microphone is opened for speech: echo cancellation, noise suppression and auto gain, asked for and granted.
    const gum = (await page.evaluate('window.__gum')) as { constraints: any; settings: any }[];
    t.is(gum.length, 1);
    t.like(gum[0]!.constraints, { audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true }, video: false });
    t.like(gum[0]!.settings, { echoCancellation: true, noiseSuppression: true, autoGainControl: true });
    // Focus stays on a control when the start button goes away.
    t.is(await page.evaluate(() => (document.activeElement?.shadowRoot?.activeElement as HTMLElement | null)?.textContent), 'Hang up');
    await page.keyboard.press('Enter');
    const ended = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'session outcome');
    t.like(ended.detail, { outcome: 'ended_by_visitor', faultDomain: 'unknown', sessionId: ok.detail.sessionId });
    const record = await callEnded(agentId, ok.detail.sessionId);
    t.true(['client_hung_up', 'client_released'].includes(record.termination_reason), record.termination_reason);
    assertTargets(t, await events(page));
  });
});

test.serial('a full conversation: greeting heard, a question through the microphone, transcripts, speaking states, video frames, reports, hang-up', async (t) => {
  t.timeout(90_000); // 18 s on a quiet 2-core machine; bounded at about four times that
  const agentId = await server.agent({ behaviour: { greeting: GREETING } });
  await withBrowser({ microphone: wavs.question }, async (browser) => {
    const page = await open(browser, `${server.url}/?agent_id=${agentId}`, t);
    const requested: string[] = [];
    page.on('request', (r) => requested.push(r.url()));
    await page.waitForFunction(() => (document.querySelector('svc-agent') as HTMLElement).dataset.record === 'loaded');
    await clickButton(page, 'Start conversation');
    t.like((await widgetView(page)).buttons, ['Cancel']);
    const connected = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 40_000, 'connect outcome');
    assertOutcomeShape(t, connected.detail, true);
    t.like(connected.detail, { outcome: 'success', phase: 'connect', faultDomain: 'unknown', agentId, httpStatus: 200 });
    const sessionId = connected.detail.sessionId as string;

    // The greeting: the bot speaks, its sound reaches the page's audio element (levels sampled from the received track).
    await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'bot', 30_000, 'greeting turn');
    const audio = await page.$eval('svc-agent', (el) => {
      const a = el.shadowRoot!.querySelector('audio')!;
      const v = el.shadowRoot!.querySelector('video')!;
      const stream = a.srcObject as MediaStream | null;
      return { paused: a.paused, muted: a.muted, tracks: stream?.getTracks().map((x) => `${x.kind}:${x.readyState}`), videoMuted: v.muted, playsInline: v.playsInline };
    });
    t.deepEqual(audio, { paused: false, muted: false, tracks: ['audio:live'], videoMuted: true, playsInline: true }, 'bot sound plays from the peer connection through the audio element; the video is muted and inline');
    const frames1 = await videoSnapshot(page);
    // Ten more frames decoded, however long a loaded machine takes (bounded, not timed).
    let frames2 = frames1;
    await holdsWithin(async () => (frames2 = await videoSnapshot(page)).decoded > frames1.decoded + 10, { timeoutMs: 30_000, intervalMs: 100 });
    t.true(frames2.decoded > frames1.decoded + 10, `video frames keep arriving (${frames1.decoded} -> ${frames2.decoded})`);
    t.true(frames1.width > 0 && frames1.height > 0, 'the avatar video has a size');

    // The question (spoken by the fake microphone 9 s after the click) and the answer.
    const userTurn = await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'user', 40_000, 'user turn');
    t.deepEqual(userTurn.detail, { owner: 'user', text: 'What is your name?', final: true });
    const answer = await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'bot' && e.detail.text !== GREETING, 40_000, 'answer turn');
    t.regex(answer.detail.text, /assistant/i);
    const latency = await waitForEvent(page, (e) => e.name === 'LatencyReport', 10_000, 'latency report');
    const all = await events(page);
    const speaking = all.filter((e) => e.name === 'botIsSpeaking').map((e) => e.detail.isSpeaking);
    t.deepEqual(speaking.slice(0, 4), [true, false, true, false], 'botIsSpeaking true then false, for the greeting and the answer');

    // Exact detail shapes.
    const first = (name: string) => all.find((e) => e.name === name)!;
    t.deepEqual(Object.keys(first('ReceivedTranscriptUser').detail).sort(), ['final', 'text', 'timestamp', 'user']);
    t.is(first('ReceivedTranscriptUser').detail.text, 'What is your name?');
    t.false(Number.isNaN(Date.parse(first('ReceivedTranscriptUser').detail.timestamp)));
    t.deepEqual(Object.keys(first('ReceivedTranscriptBot').detail), ['text']);
    t.deepEqual(Object.keys(first('ReceivedTranscriptBotPartial').detail).sort(), ['final', 'owner', 'text']);
    t.like(first('ReceivedTranscriptBotPartial').detail, { owner: 'bot', final: false });
    t.is(first('BotTtsStopped').detail, null);
    t.is(first('UserStartedSpeaking').detail, null);
    t.is(first('UserStoppedSpeaking').detail, null);
    t.deepEqual(Object.keys(first('UpdateBotState').detail), ['botState']);
    t.deepEqual(Object.keys(first('UpdateConnectionState').detail), ['connectionState']);
    t.deepEqual(Object.keys(first('userSpeakingChanged').detail), ['isSpeaking']);
    t.deepEqual(Object.keys(first('userVolume').detail), ['volume']);
    t.deepEqual(Object.keys(first('botVolume').detail), ['volume']);
    t.true(all.some((e) => e.name === 'botVolume' && e.detail.volume > 0.01), 'the bot is heard at the page (botVolume)');
    t.true(all.some((e) => e.name === 'userVolume' && e.detail.volume > 0.01), 'the microphone is heard (userVolume)');
    t.deepEqual(all.filter((e) => e.name === 'UpdateConnectionState').map((e) => e.detail.connectionState), ['requesting', 'connecting', 'connected', 'ready']);
    const botStates = all.filter((e) => e.name === 'UpdateBotState').map((e) => e.detail.botState);
    t.is(botStates[0], 'initializing');
    for (const s of ['listening', 'speaking', 'thinking']) t.true(botStates.includes(s), `botState ${s} seen: ${botStates.join(',')}`);

    const timing = all.find((e) => e.name === 'ConnectionTimingReport')!.detail;
    t.like(timing, { sessionId, agentId, instanceId: connected.detail.instanceId, connectAttempts: 1 });
    for (const mark of ['scriptStart', 'startClicked', 'microphoneReady', 'connectRequest', 'connectResponse', 'signallingJoined', 'iceConnected', 'firstVideoFrame', 'botReady']) {
      t.is(typeof timing.marks[mark], 'number', `mark ${mark}`);
    }
    t.true(timing.marks.scriptStart <= timing.marks.startClicked && timing.marks.startClicked <= timing.marks.connectRequest && timing.marks.connectRequest <= timing.marks.connectResponse && timing.marks.connectResponse <= timing.marks.signallingJoined && timing.marks.signallingJoined <= timing.marks.iceConnected);
    t.true(timing.durations.totalMs > 0);
    t.log(`connection timing: ${JSON.stringify(timing.durations)}`);

    t.like(latency.detail, { sessionId, agentId, instanceId: connected.detail.instanceId });
    t.deepEqual(Object.keys(latency.detail.stages).sort(), ['avatarMs', 'endOfTurnMs', 'llmTtfbMs', 'sttMs', 'ttsTtfbMs', 'vadStopMs']);
    t.is(typeof latency.detail.userStoppedToBotAudioMs, 'number');
    t.is(typeof latency.detail.userStoppedToBotAudioHeardMs, 'number', 'the page heard the answer after the visitor stopped');
    t.log(`latency: ${JSON.stringify(latency.detail)}`);
    // Observation for the record (not asserted): bot-started-speaking for the answer -> first loud botVolume sample.
    const answerStart = all.filter((e) => e.name === 'botIsSpeaking' && e.detail.isSpeaking)[1];
    const loud = answerStart && all.find((e) => e.name === 'botVolume' && e.at > answerStart.at && e.detail.volume > 0.01);
    if (answerStart && loud) t.log(`bot-started-speaking -> audible at the page: ${Math.round(loud.at - answerStart.at)} ms (100 ms sampling)`);
    t.is((await widgetView(page)).video, 'on');
    t.false(requested.some((u) => u.includes('livekit-client.js')), 'an embedded room: the LiveKit module is never fetched');

    await clickButton(page, 'Hang up');
    const ended = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'session outcome');
    assertOutcomeShape(t, ended.detail, true);
    t.like(ended.detail, { outcome: 'ended_by_visitor', faultDomain: 'unknown', sessionId, instanceId: connected.detail.instanceId });
    t.deepEqual(outcomes(await events(page)).map((o) => `${o.phase}:${o.outcome}`), ['connect:success', 'session:ended_by_visitor'], 'one outcome per phase');
    const view = await widgetView(page);
    t.like(view, { view: 'ended', video: 'off', status: 'The conversation has ended.' });
    t.deepEqual(view.buttons, ['Start again']);
    t.true(['client_hung_up', 'client_released'].includes((await callEnded(agentId, sessionId)).termination_reason));
    assertTargets(t, await events(page));
    await screenshot(page, 'docs/media/widget-ended.png');
  });
});

async function spokenMs(text: string): Promise<number> {
  const voice = new LocalTTSService();
  let samples = 0;
  for await (const e of voice.synthesize({ text, language: 'en', sampleRate: 16_000 })) if (e.type === 'audio') samples += e.pcm.length;
  return Math.round(samples / 16);
}

/** Screenshots of the widget's states for docs/media, only when SVC_WIDGET_SCREENSHOTS=1 (a normal run leaves the tree clean). */
async function screenshot(page: Page, path: string, selector = 'svc-agent'): Promise<void> {
  if (process.env.SVC_WIDGET_SCREENSHOTS !== '1') return;
  const box = (await page.locator(selector).first().boundingBox())!;
  await page.screenshot({ path, clip: { x: Math.max(0, box.x - 8), y: Math.max(0, box.y - 8), width: box.width + 16, height: box.height + 16 } });
}

test.serial('barge-in: the visitor talks over the greeting; the bot stops and answers', async (t) => {
  const greetingMs = await spokenMs(LONG_GREETING);
  const agentId = await server.agent({ behaviour: { greeting: LONG_GREETING } });
  await withBrowser({ microphone: wavs.bargeIn }, async (browser) => {
    const page = await open(browser, `${server.url}/?agent_id=${agentId}`, t);
    await clickButton(page, 'Start conversation');
    const connected = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 40_000, 'connect outcome');
    t.is(connected.detail.outcome, 'success');
    await waitForEvent(page, (e) => e.name === 'botIsSpeaking' && e.detail.isSpeaking, 20_000, 'greeting starts');
    // Screenshot of the speaking state while the greeting plays.
    await screenshot(page, 'docs/media/widget-speaking.png');
    const userTurn = await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'user', 40_000, 'user turn');
    t.is(userTurn.detail.text, 'What is your name?');
    await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'bot' && /assistant/i.test(e.detail.text), 40_000, 'answer');
    const all = await events(page);
    const started = all.find((e) => e.name === 'botIsSpeaking' && e.detail.isSpeaking)!;
    const visitorSpoke = all.find((e) => e.name === 'userSpeakingChanged' && e.detail.isSpeaking)!;
    const stopped = all.find((e) => e.name === 'BotTtsStopped')!;
    const quiet = all.find((e) => e.name === 'botIsSpeaking' && !e.detail.isSpeaking)!;
    // The visitor's sound pauses the greeting at once (BotPaused: its audio stops there); the words
    // that follow make it an interruption (BotInterrupted, then BotTtsStopped): docs/behaviours.md,
    // "False interruptions".
    const paused = all.find((e) => e.name === 'BotPaused');
    const interrupted = all.find((e) => e.name === 'BotInterrupted');
    t.truthy(paused, 'the greeting was paused by the visitor\'s sound');
    t.true(['words', 'long_speech'].includes(interrupted?.detail?.reason), `and interrupted by the words or their length: ${JSON.stringify(interrupted?.detail)}`);
    t.true(started.at < visitorSpoke.at && visitorSpoke.at < stopped.at, 'the visitor spoke while the greeting played, then it stopped');
    t.true(started.at < paused!.at && paused!.at <= interrupted!.at && interrupted!.at <= stopped.at, 'paused, then interrupted, then stopped');
    t.true(paused!.at - started.at < greetingMs - 2_000, `the greeting's audio stopped after ${Math.round(paused!.at - started.at)} ms of its ${greetingMs} ms`);
    // The bot went quiet at the pause the visitor's sound caused, not before it (a greeting that
    // ended or ran dry on its own). Not against the page's own meter (userSpeakingChanged): that
    // needs several loud samples of a page timer, and on loaded cores the server's pause, which
    // hears the same microphone over WebRTC, reached the page first (run L1).
    const times = { started: started.at, visitorSpoke: visitorSpoke.at, paused: paused?.at, quiet: quiet.at, interrupted: interrupted?.at, stopped: stopped.at };
    t.true(quiet.at >= paused!.at, `botIsSpeaking went false at the pause, not before it: ${JSON.stringify(times)}`);
    t.true(all.some((e) => e.name === 'UserStartedSpeaking'), 'the bot heard the visitor start');
    t.true(all.filter((e) => e.name === 'botIsSpeaking').map((e) => e.detail.isSpeaking).join().startsWith('true,false,true'), 'then the bot spoke its answer');
    const greetingTurn = all.find((e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'bot')!;
    t.log(`greeting turn as reported by the bot: "${greetingTurn.detail.text}"`);
    await clickButton(page, 'Hang up');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'session outcome');
    assertTargets(t, await events(page), ['agent']);
  });
});

test.serial('a refused microphone ends the attempt with mic_permission_denied (client_env), shown in plain words, no session', async (t) => {
  const agentId = await server.agent({});
  await withBrowser({ denyMicrophone: true }, async (browser) => {
    const page = await open(browser, `${server.url}/?agent_id=${agentId}`, t);
    await clickButton(page, 'Start conversation');
    const outcome = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 15_000, 'outcome');
    assertOutcomeShape(t, outcome.detail, false);
    t.like(outcome.detail, { outcome: 'mic_permission_denied', phase: 'connect', faultDomain: 'client_env', httpStatus: null, agentId });
    const view = await widgetView(page);
    t.is(view.view, 'error');
    t.regex(view.status, /Microphone access is blocked/);
    t.deepEqual(view.buttons, ['Try again']);
    const calls = await server.call('GET', `/v1/agents/${agentId}/calls`);
    t.is(calls.body.data.length, 0, 'no session was started');
    t.deepEqual((await events(page)).map((e) => e.name), ['UpdateBotState', 'UpdateConnectionState', 'UpdateBotState', 'UpdateConnectionState', 'SvcSessionOutcome']);
    await screenshot(page, 'docs/media/widget-error.png');
  });
});

test.serial('two widgets on one page: distinct instanceIds; at max_concurrency the second waits in the queue (429) and is admitted after the first releases', async (t) => {
  t.timeout(90_000); // 15 s on a quiet 2-core machine; bounded at about four times that
  // A short session limit keeps retry_after_seconds (derived from the live session's hard end) small.
  const agentId = await server.agent({ max_concurrency: 1, session_limit_seconds: 12, behaviour: { greeting: GREETING } });
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const page = await open(browser, customerPage(agentId, { two: '1' }), t);
    await clickButton(page, 'Start conversation', '#one');
    const first = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'connect', 40_000, 'first connects');
    t.is(first.detail.outcome, 'success');
    await clickButton(page, 'Start conversation', '#two');
    await waitForEvent(page, (e) => e.name === 'UpdateQueuing' && e.target === 'two' && e.detail.queuing === true, 15_000, 'second queued');
    const queuedView = await widgetView(page, '#two');
    t.is(queuedView.view, 'queued');
    t.deepEqual(queuedView.buttons, ['Cancel']);
    await screenshot(page, 'docs/media/widget-queued.png', '#two');
    await clickButton(page, 'Hang up', '#one');
    const second = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'connect' && e.detail.instanceId !== first.detail.instanceId, 45_000, 'second admitted');
    t.like(second.detail, { outcome: 'success', httpStatus: 200 });
    t.not(second.detail.instanceId, first.detail.instanceId, 'each element has its own instanceId');
    t.not(second.detail.sessionId, first.detail.sessionId);
    const all = await events(page);
    t.deepEqual(all.filter((e) => e.name === 'UpdateQueuing').map((e) => `${e.target}:${e.detail.queuing}`), ['two:true', 'two:false']);
    const firstEnd = all.find((e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session')!;
    t.like(firstEnd.detail, { outcome: 'ended_by_visitor', instanceId: first.detail.instanceId });
    const timing = all.filter((e) => e.name === 'ConnectionTimingReport').map((e) => e.detail).find((d) => d.instanceId === second.detail.instanceId)!;
    t.true(timing.connectAttempts >= 2, `${timing.connectAttempts} connect attempts`);
    t.true(timing.durations.queuedMs > 0);
    t.true(all.find((e) => e.name === 'UpdateQueuing' && !e.detail.queuing)!.at > firstEnd.at, 'admitted only after the first released');
    await clickButton(page, 'Hang up', '#two');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session' && e.detail.instanceId === second.detail.instanceId, 10_000, 'second ends');
    assertTargets(t, await events(page), ['one', 'two']);
  });
});

test.serial('connection timeout: ConnectionTimeout with its detail, the widget resets to an error with retry, the session is released; retry connects', async (t) => {
  const agentId = await server.agent({});
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    // 1 ms cannot cover the connect request (admission in the database, room, bot start): the real
    // setup overruns it while the request is in flight (0.05 s was sometimes enough on a warm server).
    const page = await open(browser, customerPage(agentId, { extra: 'connect-timeout="0.001"' }), t);
    const before = server.releases.length;
    await clickButton(page, 'Start conversation');
    const timeout = await waitForEvent(page, (e) => e.name === 'ConnectionTimeout', 15_000, 'timeout');
    t.deepEqual(Object.keys(timeout.detail).sort(), ['bot_state', 'connection_state', 'duration_s']);
    t.is(timeout.detail.duration_s, 0.001, 'the setup timeout that was exceeded');
    t.is(timeout.detail.connection_state, 'requesting');
    t.is(timeout.detail.bot_state, 'initializing');
    const outcome = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 5_000, 'outcome');
    t.like(outcome.detail, { outcome: 'connection_timeout', phase: 'connect', faultDomain: 'ojin' });
    const view = await widgetView(page);
    t.like(view, { view: 'error', status: 'Connecting took too long. Please try again.' });
    t.deepEqual(view.buttons, ['Try again']);
    t.true((await events(page)).findIndex((e) => e.name === 'ConnectionTimeout') < (await events(page)).findIndex((e) => e.name === 'SvcSessionOutcome'));
    // The connect request was admitted after the widget gave up: the widget releases that session when the answer arrives.
    await until(async () => server.releases.length > before, { timeoutMs: 15_000, intervalMs: 100, what: 'the late session to be released' });
    const calls = await until(async () => {
      const list = (await server.call('GET', `/v1/agents/${agentId}/calls`)).body.data as any[];
      return list.length === 1 && list[0].ended_at ? list : undefined;
    }, { timeoutMs: 15_000, intervalMs: 100, what: 'the late session to end' });
    t.is(calls[0].termination_reason, 'client_released');
    // Retry with a normal timeout.
    await page.$eval('svc-agent', (el) => el.removeAttribute('connect-timeout'));
    await clickButton(page, 'Try again');
    const retried = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.outcome === 'success', 40_000, 'retry connects');
    t.is(retried.detail.instanceId, outcome.detail.instanceId, 'same element');
    await clickButton(page, 'Hang up');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'ended');
  });
});

test.serial('a preview that is a video (an idle video as preview_url) plays muted and looping in place of the image, and gives way to the avatar during the call', async (t) => {
  const agentId = await server.agent({ title: 'Ada in motion', preview_url: `${site.url}/preview.webm` });
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const page = await open(browser, customerPage(agentId), t);
    await page.waitForFunction(() => (document.querySelector('svc-agent') as HTMLElement).dataset.record === 'loaded');
    const previewState = () =>
      page.$eval('svc-agent', (el) => {
        const video = el.shadowRoot!.querySelector('.preview-video') as HTMLVideoElement;
        const img = el.shadowRoot!.querySelector('.preview') as HTMLImageElement;
        return { videoShown: getComputedStyle(video).display !== 'none', videoWidth: video.videoWidth, playing: !video.paused && video.currentTime > 0, muted: video.muted, loop: video.loop, imageShown: getComputedStyle(img).display !== 'none' && getComputedStyle(img).visibility !== 'hidden' };
      });
    await page.waitForFunction(() => {
      const video = document.querySelector('svc-agent')!.shadowRoot!.querySelector('.preview-video') as HTMLVideoElement;
      return video.videoWidth === 320 && video.currentTime > 0;
    }, undefined, { timeout: 20_000 });
    t.deepEqual(await previewState(), { videoShown: true, videoWidth: 320, playing: true, muted: true, loop: true, imageShown: false });
    await clickButton(page, 'Start conversation');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.outcome === 'success', 40_000, 'connected');
    await page.waitForFunction(() => (document.querySelector('svc-agent')!.shadowRoot!.querySelector('.card') as HTMLElement).dataset.video === 'on', undefined, { timeout: 20_000 });
    t.like(await previewState(), { videoShown: false, playing: false }, 'the avatar video takes its place during the call; the preview is paused');
    await clickButton(page, 'Hang up');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'ended');
  });
});

test.serial('start() from a handler of the call\'s end starts the next call (a page that reconnects by itself); an ended call suspends its AudioContext', async (t) => {
  const agentId = await server.agent({});
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const page = await open(browser, customerPage(agentId, { extra: 'connect-timeout="0.001"' }), t);
    // The page's own retry: on the first timeout it restores the timeout and starts again, from the
    // outcome handler (which runs before the widget shows its error view).
    await page.evaluate(() => {
      window.addEventListener('SvcSessionOutcome', (e) => {
        const el = document.querySelector('svc-agent') as HTMLElement & { start(): void };
        if ((e as CustomEvent).detail.outcome !== 'connection_timeout' || (window as any).restarted) return;
        (window as any).restarted = true;
        el.removeAttribute('connect-timeout');
        el.start();
      });
    });
    await clickButton(page, 'Start conversation');
    const first = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 15_000, 'the first outcome');
    t.is(first.detail.outcome, 'connection_timeout');
    const second = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.outcome === 'success', 40_000, 'the restarted call connects');
    t.is(second.detail.instanceId, first.detail.instanceId, 'the same element');
    const view = await widgetView(page);
    t.not(view.view, 'error', 'the running call\'s view, not the ended one\'s error');
    t.true(view.buttons.includes('Hang up'), view.buttons.join(', '));
    t.is(await page.$eval('svc-agent', (el) => (el as unknown as { audioContext: AudioContext | null }).audioContext?.state), 'running');
    await clickButton(page, 'Hang up');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'ended');
    await page.waitForFunction(() => (document.querySelector('svc-agent') as unknown as { audioContext: AudioContext | null }).audioContext?.state === 'suspended', undefined, { timeout: 5_000 });
    t.pass('the AudioContext was suspended with the call');
  });
});

test.serial("the room's server cannot set up the visitor's media (a non-fatal internal_error): connection_failed at once, the service's fault (ojin), not ice_failed after the setup timeout", async (t) => {
  const agentId = await server.agent({});
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const page = await open(browser, customerPage(agentId), t);
    // Between the page and the server's signalling (as a proxy would sit): the server's offer is
    // replaced by the error the server sends when it cannot make this visitor's peer connection.
    await page.routeWebSocket(/\/v1\/rooms\/signal/, (ws) => {
      const upstream = ws.connectToServer();
      ws.onMessage((m) => upstream.send(m));
      upstream.onMessage((m) => {
        const type = JSON.parse(String(m)).type;
        if (type === 'offer') ws.send(JSON.stringify({ type: 'error', code: 'internal_error', message: 'could not set up the media connection: the sources are closed', fatal: false }));
        else if (type !== 'candidate') ws.send(m);
      });
    });
    const before = server.releases.length;
    await clickButton(page, 'Start conversation');
    const outcome = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 60_000, 'outcome');
    t.like(outcome.detail, { outcome: 'connection_failed', phase: 'connect', faultDomain: 'ojin' });
    assertOutcomeShape(t, outcome.detail, true);
    await until(async () => server.releases.length > before, { timeoutMs: 15_000, intervalMs: 100, what: 'the session to be released' });
  });
});

test.serial('a call given up while its room join is still unanswered closes the join\'s signalling socket', async (t) => {
  const agentId = await server.agent({});
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const page = await open(browser, customerPage(agentId, { extra: 'connect-timeout="4"' }), t);
    let opened = 0;
    let closedByPage = 0;
    // The room never answers the join (its `joined` is held back): the call's setup timeout ends it.
    await page.routeWebSocket(/\/v1\/rooms\/signal/, (ws) => {
      opened++;
      const upstream = ws.connectToServer();
      ws.onMessage((m) => upstream.send(m));
      upstream.onMessage(() => undefined);
      ws.onClose(() => {
        closedByPage++;
        upstream.close();
      });
    });
    await clickButton(page, 'Start conversation');
    const outcome = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 60_000, 'outcome');
    t.like(outcome.detail, { outcome: 'connection_timeout', phase: 'connect' });
    t.is(opened, 1);
    await until(async () => closedByPage >= 1, { timeoutMs: 15_000, intervalMs: 50, what: `the page to close the join's socket (closed ${closedByPage})` });
    t.log(`closes seen: ${closedByPage}`);
  });
});

test.serial('client tools: a client-mode tool call arrives as svcToolCall on window with parsed arguments; appendSystemContext sends while connected', async (t) => {
  const agentId = await server.agent({
    behaviour: { greeting: 'Hi.' },
    tools: [{ type: 'function', enabled: true, function: { name: 'open_page', description: 'Opens a page of the site', parameters: { type: 'object', properties: { page: { type: 'string' } }, required: ['page'] } }, delivery: { mode: 'client' } }],
  });
  await withBrowser({ microphone: wavs.tool }, async (browser) => {
    const page = await open(browser, `${server.url}/?agent_id=${agentId}`, t);
    t.false(await page.$eval('svc-agent', (el) => (el as any).appendSystemContext('too early')), 'nothing to send to before a call');
    await clickButton(page, 'Start conversation');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 40_000, 'connect');
    t.true(await page.$eval('svc-agent', (el) => (el as any).appendSystemContext('The visitor is on the pricing page.')));
    t.is(await page.$eval('svc-agent', (el) => { try { (el as any).appendSystemContext('x'.repeat(4001)); return 'sent'; } catch (e) { return (e as Error).name; } }), 'RangeError');
    const call = await waitForEvent(page, (e) => e.name === 'svcToolCall', 40_000, 'tool call');
    t.is(call.target, 'window');
    t.deepEqual(Object.keys(call.detail).sort(), ['arguments', 'function_name', 'tool_call_id']);
    t.like(call.detail, { function_name: 'open_page', arguments: { page: 'pricing' } });
    t.true(call.detail.tool_call_id.length > 0);
    await clickButton(page, 'Hang up');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'ended');
    t.is((await events(page, 'svcToolCall')).length, 1, 'delivered once');
  });
});

test.serial('closing the tab releases the session (pagehide beacon); removing the element releases it too', async (t) => {
  const agentId = await server.agent({ behaviour: { greeting: GREETING } });
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const page = await open(browser, `${server.url}/?agent_id=${agentId}`, t);
    await clickButton(page, 'Start conversation');
    const connected = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 40_000, 'connect');
    const before = server.releases.length;
    await page.close({ runBeforeUnload: true });
    const record = await callEnded(agentId, connected.detail.sessionId, 15_000);
    t.true(['client_hung_up', 'client_released'].includes(record.termination_reason), `ended by the page going away (${record.termination_reason}), not by the departure timeout`);
    await until(async () => server.releases.length > before, { timeoutMs: 10_000, intervalMs: 100, what: 'the release request' });
    t.is(server.releases.length, before + 1, 'one release request reached the server');
    t.is(server.releases.at(-1)!.mode, 'no-cors', 'sent with navigator.sendBeacon');

    const page2 = await open(browser, `${server.url}/?agent_id=${agentId}`, t);
    await clickButton(page2, 'Start conversation');
    const second = await waitForEvent(page2, (e) => e.name === 'SvcSessionOutcome', 40_000, 'connect');
    await page2.$eval('svc-agent', (el) => el.remove());
    const removed = await waitForEvent(page2, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'removed outcome');
    t.like(removed.detail, { outcome: 'element_removed', faultDomain: 'unknown', sessionId: second.detail.sessionId });
    const record2 = await callEnded(agentId, second.detail.sessionId, 15_000);
    t.is(server.releases.at(-1)!.mode, 'cors', 'released with fetch (keepalive)');
    t.true(['client_hung_up', 'client_released'].includes(record2.termination_reason), record2.termination_reason);
  });
});

test.serial('phone-sized viewport, light and dark pages: the card fits, text contrast is readable, controls are large enough', async (t) => {
  const agentId = await server.agent({ title: 'Ada from Acme', preview_url: `${site.url}/preview.png` });
  for (const scheme of ['light', 'dark'] as const) {
    await withBrowser({ microphone: wavs.silent, viewport: { width: 360, height: 740 }, colorScheme: scheme }, async (browser) => {
      const page = await open(browser, customerPage(agentId, { bg: scheme === 'dark' ? '#0b0b0f' : '#ffffff', extra: 'style="width:100%"' }), t);
      await page.waitForFunction(() => (document.querySelector('svc-agent') as HTMLElement).dataset.record === 'loaded');
      // A string: tsx's helpers (__name) do not exist in the page.
      const m = (await page.evaluate(`(() => {
        const el = document.querySelector('svc-agent');
        const root = el.shadowRoot;
        function rgb(c) { return (c.match(/[\\d.]+/g) || []).slice(0, 3).map(Number); }
        function lum(c) {
          const v = rgb(c).map(function (x) { const s = x / 255; return s <= 0.03928 ? s / 12.92 : Math.pow((s + 0.055) / 1.055, 2.4); });
          return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
        }
        function ratio(a, b) { const x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); }
        const card = root.querySelector('.card');
        const bg = getComputedStyle(card).backgroundColor;
        const title = root.querySelector('.title');
        const start = root.querySelector('.start');
        const box = el.getBoundingClientRect();
        return {
          width: box.width, right: box.right, viewport: window.innerWidth,
          titleContrast: ratio(getComputedStyle(title).color, bg),
          buttonContrast: ratio(getComputedStyle(start).color, getComputedStyle(start).backgroundColor),
          buttonHeight: start.getBoundingClientRect().height,
          cardBg: bg,
        };
      })()`)) as { width: number; right: number; viewport: number; titleContrast: number; buttonContrast: number; buttonHeight: number; cardBg: string };
      t.log(`${scheme} page: card background ${m.cardBg}`);
      t.true(m.right <= m.viewport, `${scheme}: the widget fits the ${m.viewport}px viewport (${m.width}px wide)`);
      t.true(m.titleContrast >= 4.5, `${scheme}: title contrast ${m.titleContrast.toFixed(1)}:1 on ${m.cardBg}`);
      t.true(m.buttonContrast >= 4.5, `${scheme}: start button contrast ${m.buttonContrast.toFixed(1)}:1`);
      t.true(m.buttonHeight >= 44, `${scheme}: touch target ${m.buttonHeight}px`);
      await screenshot(page, `docs/media/widget-idle-${scheme}.png`);
    });
  }
});

test.serial('the server ends the session (session_limit_seconds): time_limit_reached, the ended view, nothing to release', async (t) => {
  // The limit counts from admission (docs/session-messages.md): it must outlast the connect, which the
  // same 4 s limit lost in a loaded CI run of the LiveKit variant (widget-livekit.test.ts).
  const agentId = await server.agent({ session_limit_seconds: 10, behaviour: { greeting: GREETING } });
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const page = await open(browser, `${server.url}/?agent_id=${agentId}`, t);
    const before = server.releases.length;
    await clickButton(page, 'Start conversation');
    const connected = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 40_000, 'connect');
    t.is(connected.detail.outcome, 'success');
    const ended = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 30_000, 'session end');
    assertOutcomeShape(t, ended.detail, true);
    t.like(ended.detail, { outcome: 'time_limit_reached', faultDomain: 'unknown', sessionId: connected.detail.sessionId });
    const view = await widgetView(page);
    t.like(view, { view: 'ended', status: 'The conversation reached its time limit.' });
    t.deepEqual(view.buttons, ['Start again']);
    t.is((await callEnded(agentId, connected.detail.sessionId)).termination_reason, 'session_limit_reached');
    t.is(server.releases.length, before, 'the widget sent no release for a session the server ended');
    const states = (await events(page)).filter((e) => e.name === 'UpdateBotState').map((e) => e.detail.botState);
    t.is(states.at(-1), 'ended');
  });
});

test.serial('the connection drops during a call: transport_lost; the widget releases the session', async (t) => {
  const agentId = await server.agent({ behaviour: { greeting: GREETING } });
  // Watches the signalling WebSocket's TCP connections (only to cut them, as a network drop would).
  const sockets: Duplex[] = [];
  const watch = (req: IncomingMessage, socket: Duplex) => {
    if ((req.url ?? '').startsWith('/v1/rooms/signal')) sockets.push(socket);
  };
  server.server.httpServer.on('upgrade', watch);
  t.teardown(() => void server.server.httpServer.off('upgrade', watch));
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const page = await open(browser, `${server.url}/?agent_id=${agentId}`, t);
    await clickButton(page, 'Start conversation');
    const connected = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 40_000, 'connect');
    t.is(sockets.length, 1);
    const before = server.releases.length;
    sockets[0]!.destroy();
    const lost = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 30_000, 'transport lost');
    t.like(lost.detail, { outcome: 'transport_lost', faultDomain: 'unknown', sessionId: connected.detail.sessionId });
    const view = await widgetView(page);
    t.like(view, { view: 'error', status: 'The connection was lost.' });
    t.deepEqual(view.buttons, ['Try again']);
    await until(async () => server.releases.length > before, { timeoutMs: 10_000, intervalMs: 100, what: 'the release request' });
    const record = await callEnded(agentId, connected.detail.sessionId, 15_000);
    t.log(`server ended the session with ${record.termination_reason}`);
    t.true(['client_released', 'client_left'].includes(record.termination_reason));
  });
});

test.serial('Session API refusals become outcomes in plain words: unknown agent, unpublished agent, hostname not allowed, a page attribute refused', async (t) => {
  const unpublished = await server.agent({});
  await server.call('PATCH', `/v1/agents/${unpublished}/status`, { body: { status: 'unpublished' } });
  const foreign = await server.agent({ allowed_hostnames: ['shop.example.com'] });
  const unknown = '00000000-0000-4000-8000-000000000000';
  const cases = [
    { agentId: unknown, outcome: 'agent_unavailable', httpStatus: 404, text: 'This agent is not available right now.', record: 'This agent is not available.' },
    { agentId: unpublished, outcome: 'agent_unavailable', httpStatus: 403, text: 'This agent is not available right now.', record: 'This agent is not available.' },
    { agentId: foreign, outcome: 'not_allowed', httpStatus: 403, text: 'This agent cannot be used on this website.', record: '' },
    // The page's own attribute refused (the spec's 256-character bound): the site's to fix.
    { agentId: await server.agent({}), extra: `client-user-ref="${'u'.repeat(257)}"`, outcome: 'invalid_settings', httpStatus: 400, text: 'This conversation is not set up correctly on this website.', record: '' },
  ];
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    for (const c of cases) {
      const page = await open(browser, customerPage(c.agentId, c.extra ? { extra: c.extra } : {}), t);
      await page.waitForFunction(() => ['loaded', 'unavailable'].includes((document.querySelector('svc-agent') as HTMLElement).dataset.record ?? ''));
      t.is((await widgetView(page)).status, c.record, `before the call (${c.outcome} ${c.httpStatus})`);
      await clickButton(page, 'Start conversation');
      const outcome = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 15_000, 'outcome');
      assertOutcomeShape(t, outcome.detail, false);
      t.like(outcome.detail, { outcome: c.outcome, phase: 'connect', faultDomain: 'backend', httpStatus: c.httpStatus, agentId: c.agentId });
      const view = await widgetView(page);
      t.like(view, { view: 'error', status: c.text });
      t.deepEqual(view.buttons, ['Try again']);
      await page.close();
    }
  });
});

test.serial('appendSystemContext changes a later answer: the same question is answered in English, then in French after "Always respond in French."', async (t) => {
  t.timeout(150_000); // 36 s on a quiet 2-core machine; bounded at about four times that
  const agentId = await server.agent({ behaviour: { greeting: GREETING } });
  await withBrowser({ microphone: wavs.twice }, async (browser) => {
    const page = await open(browser, `${server.url}/?agent_id=${agentId}`, t);
    await clickButton(page, 'Start conversation');
    const connected = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 40_000, 'connect outcome');
    t.is(connected.detail.outcome, 'success');
    // The first answer is being generated (its text arrived) before the context is appended.
    const firstUser = await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'user', 40_000, 'first question');
    t.is(firstUser.detail.text, 'What is your name?');
    const firstText = await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptBot' && e.at > firstUser.at, 20_000, 'first answer text');
    t.true(await page.$eval('svc-agent', (el) => (el as any).appendSystemContext('Always respond in French.')), 'sent');
    const userTurns = async () => (await events(page)).filter((e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'user');
    const secondUser = await until(async () => (await userTurns())[1], { timeoutMs: 40_000, intervalMs: 100, what: 'the second question' });
    t.is(secondUser.detail.text, 'What is your name?', 'the same question again');
    const botTurnsAfter = (after: number) => events(page).then((all) => all.filter((e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'bot' && e.at > after));
    const firstAnswer = (await botTurnsAfter(firstUser.at))[0]!;
    t.true(firstAnswer.at < secondUser.at, 'the first answer ended before the second question');
    const secondAnswer = await until(async () => (await botTurnsAfter(secondUser.at))[0], { timeoutMs: 40_000, intervalMs: 100, what: 'the second answer' });
    t.log(`before: "${firstAnswer.detail.text}" (first chunk "${firstText.detail.text}"); after: "${secondAnswer.detail.text}"`);
    t.regex(firstAnswer.detail.text, /\bI am\b.*\boffline\b/i, 'the first answer is in English');
    t.notRegex(firstAnswer.detail.text, /Je suis|remplaçant|hors ligne/i);
    t.regex(secondAnswer.detail.text, /Je suis|remplaçant|hors ligne/i, 'the later answer follows the appended context (French)');
    await clickButton(page, 'Hang up');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'ended');
  });
});

test.serial('auth_enabled agents: the auth-token attribute is sent as auth_token; missing or wrong tokens are not_allowed; a token for this visitor connects', async (t) => {
  const agentId = await server.agent({ behaviour: { greeting: GREETING } });
  const enabled = await server.call('PATCH', `/v1/agents/${agentId}`, { body: { auth_enabled: true } });
  t.is(enabled.status, 200);
  const secret = enabled.body.auth_secret as string;
  t.is(typeof secret, 'string');
  const good = mintConnectToken(secret, agentId, { clientUserRef: 'visitor-1' });
  const forAnother = mintConnectToken(secret, agentId, { clientUserRef: 'visitor-2' });
  const wrongSecret = mintConnectToken('not-the-secret', agentId, { clientUserRef: 'visitor-1' });
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    for (const [label, extra] of [
      ['no token', 'client-user-ref="visitor-1"'],
      ['a token for another visitor', `client-user-ref="visitor-1" auth-token="${forAnother}"`],
      ['a token minted with another secret', `client-user-ref="visitor-1" auth-token="${wrongSecret}"`],
    ] as const) {
      const page = await open(browser, customerPage(agentId, { extra }), t);
      await clickButton(page, 'Start conversation');
      const outcome = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 15_000, `outcome with ${label}`);
      assertOutcomeShape(t, outcome.detail, false);
      t.like(outcome.detail, { outcome: 'not_allowed', phase: 'connect', faultDomain: 'backend', httpStatus: 403 }, label);
      t.like(await widgetView(page), { view: 'error', status: 'This agent cannot be used on this website.' });
      await page.close();
    }
    t.is((await server.call('GET', `/v1/agents/${agentId}/calls`)).body.data.length, 0, 'no session for a refused token');
    const page = await open(browser, customerPage(agentId, { extra: `client-user-ref="visitor-1" auth-token="${good}"` }), t);
    await clickButton(page, 'Start conversation');
    const ok = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 40_000, 'connect with the token');
    t.like(ok.detail, { outcome: 'success', phase: 'connect', httpStatus: 200 });
    const record = await callRecord(agentId, ok.detail.sessionId);
    t.is(record.client_user_ref, 'visitor-1', 'client-user-ref sent with the token it is bound to');
    await clickButton(page, 'Hang up');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'ended');
  });
});

test.serial('503 server_busy (this server has no capacity) queues like a 429: UpdateQueuing, the queued view, admitted after a release; queue-timeout gives up with faultDomain ojin', async (t) => {
  const agentId = await server.agent({ max_concurrency: -1, behaviour: { greeting: GREETING } });
  // One slot, slots only: the test needs the second visitor refused because the slot is taken and
  // admitted as soon as it is released, not later because the first bot's frames ran late.
  const oneSlot = createCapacityGate({ limit: 1, loadCheck: false });
  server.capacity = oneSlot;
  t.teardown(() => oneSlot.close());
  t.teardown(() => void (server.capacity = server.defaultCapacity));
  await withBrowser({ microphone: wavs.silent }, async (browser) => {
    const page = await open(browser, customerPage(agentId, { two: '1' }), t);
    const busy: { status: number; retryAfter: string | null; body: any }[] = [];
    page.on('response', (res) => {
      if (res.url().endsWith('/v1/public/agents/connect') && res.status() === 503) void res.json().then((body) => busy.push({ status: res.status(), retryAfter: res.headers()['retry-after'] ?? null, body }), () => undefined);
    });
    await clickButton(page, 'Start conversation', '#one');
    const first = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'connect', 40_000, 'first connects');
    t.is(first.detail.outcome, 'success');
    await clickButton(page, 'Start conversation', '#two');
    await waitForEvent(page, (e) => e.name === 'UpdateQueuing' && e.target === 'two' && e.detail.queuing === true, 15_000, 'second queued');
    t.is((await widgetView(page, '#two')).view, 'queued');
    await until(async () => busy.length > 0, { timeoutMs: 5_000, intervalMs: 100, what: 'the 503 answer seen by the page' });
    t.like(busy[0], { status: 503, body: { error_code: 'server_busy' } });
    t.is(typeof busy[0]!.body.retry_after_seconds, 'number');
    t.truthy(busy[0]!.retryAfter, 'Retry-After header');

    // Another page whose queue-timeout is shorter than the server's retry_after gives up at once: ojin (this service's capacity).
    const impatient = await open(browser, customerPage(agentId, { extra: 'queue-timeout="2"' }), t);
    await clickButton(impatient, 'Start conversation');
    const gaveUp = await waitForEvent(impatient, (e) => e.name === 'SvcSessionOutcome', 15_000, 'queue timeout');
    assertOutcomeShape(t, gaveUp.detail, false);
    t.like(gaveUp.detail, { outcome: 'queue_timeout', phase: 'connect', faultDomain: 'ojin', httpStatus: 503 });
    t.deepEqual((await events(impatient, 'UpdateQueuing')).map((e) => e.detail.queuing), [true, false]);
    await impatient.close();

    await clickButton(page, 'Hang up', '#one');
    const second = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'connect' && e.detail.instanceId !== first.detail.instanceId, 45_000, 'second admitted');
    t.like(second.detail, { outcome: 'success', httpStatus: 200 });
    const all = await events(page);
    t.deepEqual(all.filter((e) => e.name === 'UpdateQueuing').map((e) => `${e.target}:${e.detail.queuing}`), ['two:true', 'two:false']);
    const firstEnd = all.find((e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session')!;
    t.true(all.find((e) => e.name === 'UpdateQueuing' && !e.detail.queuing)!.at > firstEnd.at, 'admitted only after the first released its capacity');
    const timing = all.filter((e) => e.name === 'ConnectionTimingReport').map((e) => e.detail).find((d) => d.instanceId === second.detail.instanceId)!;
    t.true(timing.connectAttempts >= 2, `${timing.connectAttempts} connect attempts`);
    await clickButton(page, 'Hang up', '#two');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session' && e.detail.instanceId === second.detail.instanceId, 10_000, 'second ends');
  });
});

test.serial('mute: a muted microphone sends silence (the bot hears nothing of a spoken question); unmuted, the same question is heard', async (t) => {
  t.timeout(150_000); // 32 s on a quiet 2-core machine; bounded at about four times that
  const agentId = await server.agent({ behaviour: { greeting: GREETING } });
  await withBrowser({ microphone: wavs.loop }, async (browser) => {
    const page = await open(browser, `${server.url}/?agent_id=${agentId}`, t);
    // Muted before the call: no race with the question, spoken 9 s after the microphone opens (and again each 19 s loop).
    await page.$eval('svc-agent', (el) => void ((el as any).muted = true));
    await clickButton(page, 'Start conversation');
    const connected = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome', 40_000, 'connect outcome');
    t.is(connected.detail.outcome, 'success');
    t.deepEqual((await widgetView(page)).buttons, ['Unmute', 'Hang up']);
    const micOpen = (await waitForEvent(page, (e) => e.name === 'ConnectionTimingReport', 5_000, 'timing')).detail.marks.microphoneReady as number;
    // Past the end of the first question (9 s + 1.3 s) with margin, in the page's clock.
    await page.waitForFunction((until) => performance.now() > until, micOpen + 13_000, { timeout: 30_000 });
    const muted = await events(page);
    t.false(muted.some((e) => e.name === 'UserStartedSpeaking' || (e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'user')), 'the bot heard nothing while muted');
    const volumes = muted.filter((e) => e.name === 'userVolume');
    t.true(volumes.length > 50 && volumes.every((e) => e.detail.volume === 0), 'userVolume is 0 while muted');
    await clickButton(page, 'Unmute');
    t.is(await page.$eval('svc-agent', (el) => (el as any).muted), false);
    t.is(await page.$eval('svc-agent', (el) => el.shadowRoot!.querySelector('.mute')!.getAttribute('aria-pressed')), 'false');
    const heard = await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'user', 40_000, 'the question after unmuting');
    t.is(heard.detail.text, 'What is your name?');
    t.true(heard.at > micOpen + 19_000, 'heard from the second loop of the question');
    t.true((await events(page, 'userVolume')).some((e) => e.detail.volume > 0.01), 'the microphone level is back');
    await clickButton(page, 'Hang up');
    await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 10_000, 'ended');
  });
});
