/**
 * The `<svc-agent>` widget as a visitor's browser sees it: a real chromium (playwright-core,
 * /usr/bin/chromium, headless) whose fake microphone plays a WAV spoken by the offline espeak
 * TTS, against a real server process (`server/main.ts`, PGlite in a temp dir, offline engines,
 * the human-portrait face). The page embeds the widget exactly as a site owner would (script tag
 * from /widget/latest/svc-agent.js and the element); nothing of ours is replaced.
 *
 * - click -> first avatar frame on screen, over SESSIONS sessions (each on a freshly loaded page,
 *   after one unmeasured warm-up session): the click is the `click` event's timestamp in the page;
 *   "on screen" is the first animation frame in which the widget's <video> is displayed with a
 *   decoded frame (requestAnimationFrame time). Also reported: the widget's own
 *   ConnectionTimingReport (click -> first video frame mark from requestVideoFrameCallback, and
 *   click -> ready).
 * - visitor stop -> first bot audio heard at the page, over TURNS turns of one session: the
 *   widget's LatencyReport `userStoppedToBotAudioHeardMs` (page measurement, 25 ms sampling;
 *   see docs/widget.md), and "ours": that minus the offline engines' own time as the bot reports
 *   it in the same LatencyReport (VAD stop delay, STT, LLM first token, TTS first audio). What
 *   remains is our pipeline, the face, the transport, chromium's jitter buffer and playout.
 *
 * One chromium at a time (2-core machine). Measure on a quiet machine: the load average is
 * printed at start and end and included in the JSON line.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { launchBrowser, RECORD_EVENTS, speechWav, type WidgetBrowser } from '../test/widget/browser.ts';
import { startServerProcess, type ServerProcess } from '../test/sessions/server-process.ts';
import { percentile, printJson, printTable } from './table.ts';

const SESSIONS = 12;
const TURNS = 12;
/** Bounds that only catch hangs. */
const CONNECT_BOUND_MS = 30_000;
const TURNS_BOUND_MS = 240_000;
/** The question the fake microphone repeats: short, recognised, short answer ("You are welcome."). */
const QUESTION = 'Thank you';

/** In the page: the click time and the first animation frame with the widget's video shown and holding a frame. */
const MEASURE = `
(() => {
  window.__bench = { click: null, onScreen: null };
  window.addEventListener('click', (e) => {
    if (window.__bench.click !== null) return;
    window.__bench.click = e.timeStamp;
    const tick = (now) => {
      const el = document.querySelector('svc-agent');
      const card = el && el.shadowRoot && el.shadowRoot.querySelector('.card');
      const video = el && el.shadowRoot && el.shadowRoot.querySelector('video');
      if (card && video && card.dataset.video === 'on' && video.readyState >= 2 && video.videoWidth > 0 && getComputedStyle(video).display !== 'none') {
        window.__bench.onScreen = now;
        return;
      }
      requestAnimationFrame(tick);
    };
    requestAnimationFrame(tick);
  }, true);
})();
`;

const pageHtml = (base: string, agentId: string) => `<!doctype html><html><head><meta charset="utf-8">
<script src="${base}/widget/latest/svc-agent.js"></script></head><body style="margin:16px">
<svc-agent agent-id="${agentId}" core-api-endpoint="${base}"></svc-agent></body></html>`;

async function poll<T>(check: () => Promise<T | null | undefined | false>, ms: number, what: string): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== null && v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const pageEvents = (page: Page, name: string) => page.evaluate((n) => (window as any).__events.filter((e: any) => e.name === n).map((e: any) => e.detail), name) as Promise<any[]>;

export async function run(): Promise<void> {
  const loadStart = loadavg()[0]!;
  console.log(`load average at start: ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-widget-'));
  let server: ServerProcess | undefined;
  let browser: WidgetBrowser | undefined;
  let site: Server | undefined;
  try {
    const [silentWav, turnsWav] = await Promise.all([
      speechWav([120_000], dataDir, 'silent.wav'),
      // Looped by chromium: a question every cycle, with room for the short answer.
      speechWav([2_500, QUESTION, 4_500], dataDir, 'turns.wav'),
    ]);
    server = await startServerProcess({ SVC_DATA_DIR: dataDir, DATABASE_URL: '' });
    const base = server.url;
    const key = server.firstKey!;
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${base}${path}`, { method, headers: { 'x-api-key': key, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
      const data = (await res.json().catch(() => undefined)) as any;
      if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(data)}`);
      return data;
    };
    const agentId = (await api('POST', '/v1/agents', { title: 'bench' })).agent_id as string;
    await api('PATCH', `/v1/agents/${agentId}`, { allowed_hostnames: ['127.0.0.1'], max_concurrency: -1, behaviour: { greeting: 'Hi.', greeting_mode: 'verbatim' } });
    await api('PATCH', `/v1/agents/${agentId}/status`, { status: 'published' });
    const callEnded = (sessionId: string) =>
      poll(async () => {
        const calls = (await api('GET', `/v1/agents/${agentId}/calls?limit=100`)).data as any[];
        return calls.find((c) => c.session_id === sessionId && c.ended_at);
      }, 15_000, `session ${sessionId} to end`);

    // The site that embeds the widget: a page of its own origin, as a customer's site would be.
    const html = pageHtml(base, agentId);
    site = createServer((req, res) => {
      if (req.url === '/favicon.ico') res.writeHead(204).end();
      else if (req.url === '/') res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' }).end(html);
      else res.writeHead(404).end();
    });
    await new Promise<void>((resolve) => site!.listen(0, '127.0.0.1', resolve));
    const pageUrl = `http://127.0.0.1:${(site.address() as AddressInfo).port}/`;
    const openPage = async (b: WidgetBrowser): Promise<Page> => {
      const page = await b.context.newPage();
      page.on('console', (m) => {
        if (m.type() === 'error' || m.type() === 'warning') console.log(`page ${m.type()}: ${m.text()}`);
      });
      page.on('pageerror', (e) => console.log(`page error: ${e.message}`));
      await page.addInitScript(RECORD_EVENTS);
      await page.addInitScript(MEASURE);
      await page.goto(pageUrl);
      await page.waitForFunction(() => (document.querySelector('svc-agent') as HTMLElement | null)?.dataset.record === 'loaded', undefined, { timeout: CONNECT_BOUND_MS });
      return page;
    };
    const start = (page: Page) => page.locator('svc-agent').getByRole('button', { name: 'Start conversation', exact: true }).click();
    const hangUp = async (page: Page) => {
      await page.locator('svc-agent').getByRole('button', { name: 'Hang up', exact: true }).click();
      await poll(async () => (await pageEvents(page, 'SvcSessionOutcome')).find((o) => o.phase === 'session'), 10_000, 'the session outcome');
    };

    // 1. Click -> first avatar frame on screen, a fresh page per session.
    browser = await launchBrowser({ microphone: silentWav });
    const onScreen: number[] = [];
    const widgetFirstFrame: number[] = [];
    const ready: number[] = [];
    const stages: Record<string, number[]> = { microphoneMs: [], connectRequestMs: [], signallingMs: [], iceMs: [], firstVideoFrameMs: [], botReadyMs: [] };
    let coldMs = NaN;
    let failures = 0;
    for (let i = 0; i <= SESSIONS; i++) {
      const page = await openPage(browser);
      try {
        await start(page);
        const outcome = await poll(async () => (await pageEvents(page, 'SvcSessionOutcome'))[0], CONNECT_BOUND_MS, 'the connect outcome');
        if (outcome.outcome !== 'success') {
          failures++;
          console.log(`session ${i}: ${outcome.outcome} (${outcome.faultDomain}, HTTP ${outcome.httpStatus})`);
          if (failures === 1) console.log(`server output so far:\n${server.output.slice(-3000)}`);
          continue;
        }
        const m = await poll(async () => {
          const b = (await page.evaluate('window.__bench')) as { click: number | null; onScreen: number | null };
          return b.onScreen !== null ? b : null;
        }, CONNECT_BOUND_MS, 'the first frame on screen');
        const timing = (await pageEvents(page, 'ConnectionTimingReport'))[0];
        const clickToScreen = m.onScreen! - m.click!;
        if (i === 0) coldMs = clickToScreen;
        else {
          onScreen.push(clickToScreen);
          widgetFirstFrame.push(timing.marks.firstVideoFrame - timing.marks.startClicked);
          ready.push(timing.durations.totalMs);
          for (const k of Object.keys(stages)) if (typeof timing.durations[k] === 'number') stages[k]!.push(timing.durations[k]);
        }
        await hangUp(page);
        await callEnded(outcome.sessionId);
      } finally {
        await page.close();
      }
    }
    await browser.close();
    browser = undefined;

    // 2. Visitor stop -> first bot audio heard at the page, TURNS turns in one session.
    browser = await launchBrowser({ microphone: turnsWav });
    const heard: number[] = [];
    const ours: number[] = [];
    const botSide: number[] = [];
    const engines: number[] = [];
    const stageValues: Record<string, number[]> = { vadStopMs: [], sttMs: [], llmTtfbMs: [], ttsTtfbMs: [], avatarMs: [] };
    let unmeasured = 0;
    {
      const page = await openPage(browser);
      try {
        await start(page);
        const outcome = await poll(async () => (await pageEvents(page, 'SvcSessionOutcome'))[0], CONNECT_BOUND_MS, 'the connect outcome');
        if (outcome.outcome !== 'success') throw new Error(`the turns session did not connect: ${outcome.outcome}`);
        const reports = await poll(async () => {
          const all = await pageEvents(page, 'LatencyReport');
          return all.filter((r) => r.userStoppedToBotAudioHeardMs !== null).length >= TURNS ? all : null;
        }, TURNS_BOUND_MS, `${TURNS} measured turns`);
        for (const r of reports) {
          if (r.userStoppedToBotAudioHeardMs === null) {
            unmeasured++;
            continue;
          }
          const s = r.stages as Record<string, number | null>;
          for (const k of Object.keys(stageValues)) if (typeof s[k] === 'number') stageValues[k]!.push(s[k]);
          const engineMs = (s.vadStopMs ?? 0) + (s.sttMs ?? 0) + (s.llmTtfbMs ?? 0) + (s.ttsTtfbMs ?? 0);
          heard.push(r.userStoppedToBotAudioHeardMs);
          engines.push(engineMs);
          ours.push(r.userStoppedToBotAudioHeardMs - engineMs);
          if (typeof r.userStoppedToBotAudioMs === 'number') botSide.push(r.userStoppedToBotAudioMs);
        }
        const turns = (await pageEvents(page, 'ReceivedTranscriptTurn')).filter((t) => t.owner === 'user').map((t) => t.text);
        const recognised = turns.filter((t) => t === QUESTION).length;
        console.log(`user turns: ${turns.length} (${recognised} recognised as "${QUESTION}")`);
        await hangUp(page);
        await callEnded(outcome.sessionId);
      } finally {
        await page.close();
      }
    }
    await browser.close();
    browser = undefined;

    const loadEnd = loadavg()[0]!;
    const p = (v: number[], q: number) => Number(percentile(v, q).toFixed(1));
    const oursShareP50 = p(ours, 50) / p(heard, 50);
    printTable([
      { figure: 'click -> first avatar frame on screen (ms)', n: onScreen.length, p50: p(onScreen, 50), p99: p(onScreen, 99), goal: 'p50 < 1000' },
      { figure: '  widget mark: click -> first video frame (ms)', n: widgetFirstFrame.length, p50: p(widgetFirstFrame, 50), p99: p(widgetFirstFrame, 99), goal: '' },
      { figure: '  widget: click -> ready (ms)', n: ready.length, p50: p(ready, 50), p99: p(ready, 99), goal: '' },
      ...Object.entries(stages).map(([k, v]) => ({ figure: `    ${k}`, n: v.length, p50: p(v, 50), p99: p(v, 99), goal: '' })),
      { figure: 'visitor stop -> first bot audio heard at the page (ms)', n: heard.length, p50: p(heard, 50), p99: p(heard, 99), goal: '' },
      { figure: '  offline engines (VAD stop, STT, LLM, TTS first audio)', n: engines.length, p50: p(engines, 50), p99: p(engines, 99), goal: '' },
      ...Object.entries(stageValues).map(([k, v]) => ({ figure: `    bot stage ${k}${k === 'avatarMs' ? ' (ours)' : ''}`, n: v.length, p50: p(v, 50), p99: p(v, 99), goal: '' })),
      { figure: '  ours (engines subtracted)', n: ours.length, p50: p(ours, 50), p99: p(ours, 99), goal: '' },
      { figure: '  bot side: its VAD stop -> first audio written (ms)', n: botSide.length, p50: p(botSide, 50), p99: p(botSide, 99), goal: '' },
    ]);
    console.log(`first (cold) session: ${coldMs.toFixed(0)} ms; failed sessions: ${failures}; turns without a page measurement: ${unmeasured}`);
    console.log(`load average at end: ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
    printJson('widget', {
      click_to_frame_on_screen_p50_ms: p(onScreen, 50), click_to_frame_on_screen_p99_ms: p(onScreen, 99), sessions: onScreen.length,
      click_to_first_video_frame_mark_p50_ms: p(widgetFirstFrame, 50), click_to_ready_p50_ms: p(ready, 50), click_to_ready_p99_ms: p(ready, 99),
      cold_first_session_ms: Number(coldMs.toFixed(1)), failed_sessions: failures,
      stop_to_bot_audio_heard_p50_ms: p(heard, 50), stop_to_bot_audio_heard_p99_ms: p(heard, 99), turns: heard.length, unmeasured_turns: unmeasured,
      engines_p50_ms: p(engines, 50), ours_p50_ms: p(ours, 50), ours_p99_ms: p(ours, 99), ours_share_p50: Number(oursShareP50.toFixed(2)),
      bot_side_stop_to_audio_p50_ms: p(botSide, 50),
      stages_p50_ms: Object.fromEntries(Object.entries(stageValues).map(([k, v]) => [k, p(v, 50)])),
      load_start: Number(loadStart.toFixed(2)), load_end: Number(loadEnd.toFixed(2)),
    });
  } finally {
    await browser?.close().catch(() => undefined);
    if (site) {
      site.closeAllConnections();
      await new Promise((r) => site!.close(r));
    }
    server?.kill('SIGTERM');
    const exited = await Promise.race([server?.exited, new Promise((r) => setTimeout(() => r('timeout'), 10_000))]);
    if (exited === 'timeout') server?.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  }
}
