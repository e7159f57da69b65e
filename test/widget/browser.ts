/**
 * The browser side of the widget tests and bench: a real Debian chromium (playwright-core) whose
 * fake microphone plays a WAV spoken by the offline espeak TTS, and helpers that read the
 * widget's events from the page. No server code is imported here (the bench runs the server in
 * a process of its own).
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { launchChromiumWith, type Chromium } from '../support/chromium.ts';
import { until } from '../../testing/until.ts';
import { concat, encodeWav, silence } from '../../core/audio.ts';
import { LocalTTSService } from '../../plugins/local/index.ts';

export { CHROMIUM_PATH } from '../support/chromium.ts';
export type WidgetBrowser = Chromium;

/**
 * One chromium (at most one at a time on this machine). `microphone`: a WAV the fake capture device
 * plays from the moment getUserMedia opens it (looped); `denyMicrophone`: the permission is refused.
 */
export async function launchBrowser(options: { microphone?: string; denyMicrophone?: boolean; viewport?: { width: number; height: number }; colorScheme?: 'light' | 'dark'; autoplayPolicy?: string } = {}): Promise<WidgetBrowser> {
  const args = ['--use-fake-device-for-media-stream'];
  if (options.denyMicrophone) args.push('--deny-permission-prompts');
  else args.push('--use-fake-ui-for-media-stream');
  if (options.microphone) args.push(`--use-file-for-fake-audio-capture=${options.microphone}`);
  if (options.autoplayPolicy) args.push(`--autoplay-policy=${options.autoplayPolicy}`);
  return launchChromiumWith({ args, viewport: options.viewport ?? { width: 1000, height: 800 }, colorScheme: options.colorScheme ?? 'light' });
}

/** A mono 16-bit WAV of `parts`: numbers are silence in ms, strings are spoken by espeak. */
export async function speechWav(parts: readonly (string | number)[], dir: string, name: string): Promise<string> {
  const voice = new LocalTTSService();
  const rate = 16_000;
  const chunks: Int16Array[] = [];
  for (const part of parts) {
    if (typeof part === 'number') chunks.push(silence(part, rate));
    else for await (const e of voice.synthesize({ text: part, language: 'en', sampleRate: rate })) if (e.type === 'audio') chunks.push(e.pcm);
  }
  const pcm = concat(chunks);
  const path = join(dir, name);
  writeFileSync(path, encodeWav(pcm, rate));
  return path;
}

/** Every widget event, recorded in the page with its target (`element` id or `window`) and whether it bubbled/composed. */
export const RECORD_EVENTS = `
(() => {
  const names = ['botIsSpeaking','ReceivedTranscriptTurn','ReceivedTranscriptUser','ReceivedTranscriptBot','ReceivedTranscriptBotPartial','BotTtsStopped','BotPaused','BotResumed','BotInterrupted','UserStartedSpeaking','UserStoppedSpeaking','ConnectionTimeout','UpdateBotState','UpdateConnectionState','UpdateQueuing','userSpeakingChanged','userVolume','botVolume','svcToolCall','LatencyReport','ConnectionTimingReport','SvcSessionOutcome'];
  window.__events = [];
  for (const name of names) {
    window.addEventListener(name, (e) => {
      const t = e.target;
      window.__events.push({
        name, detail: e.detail === undefined ? '__undefined__' : JSON.parse(JSON.stringify(e.detail)),
        target: t === window ? 'window' : (t && t.id) || (t && t.tagName) || String(t),
        bubbles: e.bubbles, composed: e.composed, isCustom: e instanceof CustomEvent, at: performance.now(),
      });
    });
  }
})();
`;

export interface RecordedEvent {
  readonly name: string;
  readonly detail: any;
  readonly target: string;
  readonly bubbles: boolean;
  readonly composed: boolean;
  readonly isCustom: boolean;
  readonly at: number;
}

export async function events(page: Page, name?: string): Promise<RecordedEvent[]> {
  const all = (await page.evaluate('window.__events')) as RecordedEvent[];
  return name ? all.filter((e) => e.name === name) : all;
}

/** The first recorded event `predicate` accepts, polled every 100 ms; past `ms`, the error names `what` and the events seen. */
export async function waitForEvent(page: Page, predicate: (e: RecordedEvent) => boolean, ms = 30_000, what = 'event'): Promise<RecordedEvent> {
  let seen: RecordedEvent[] = [];
  return until(async () => (seen = await events(page)).find(predicate), {
    timeoutMs: ms,
    intervalMs: 100,
    what: () => `${what}; saw ${seen.filter((e) => !/Volume$/.test(e.name)).map((e) => e.name + (e.name === 'SvcSessionOutcome' ? ':' + e.detail.outcome : '')).join(', ')}`,
  });
}

/** The widget's visible state from its shadow DOM. */
export async function widgetView(page: Page, selector = 'svc-agent'): Promise<{ view: string; video: string; title: string; status: string; buttons: string[]; previewSrc: string | null }> {
  return page.$eval(selector, (el) => {
    const root = el.shadowRoot!;
    const card = root.querySelector('.card') as HTMLElement;
    return {
      view: card.dataset.view!,
      video: card.dataset.video!,
      title: root.querySelector('.title')!.textContent!,
      status: root.querySelector('.status')!.textContent!,
      buttons: [...root.querySelectorAll('button')].filter((b) => !(b as HTMLButtonElement).hidden).map((b) => b.textContent!),
      previewSrc: (root.querySelector('.preview') as HTMLImageElement).getAttribute('src'),
    };
  });
}

export async function clickButton(page: Page, label: string, selector = 'svc-agent'): Promise<void> {
  await page.locator(selector).getByRole('button', { name: label, exact: true }).click();
}

/**
 * Observes (calls through, changes nothing) the page's getUserMedia: the constraints asked for and
 * the settings of the audio track the browser gave, in `window.__gum`.
 */
export const OBSERVE_MICROPHONE = `
(() => {
  window.__gum = [];
  const md = navigator.mediaDevices;
  if (!md || !md.getUserMedia) return;
  const original = md.getUserMedia.bind(md);
  md.getUserMedia = async (constraints) => {
    const stream = await original(constraints);
    const track = stream.getAudioTracks()[0];
    window.__gum.push({ constraints: JSON.parse(JSON.stringify(constraints)), settings: track ? track.getSettings() : null });
    return stream;
  };
})();
`;

/** Runs `run` with a fresh browser, closed afterwards whatever happens. */
export async function withBrowser<T>(options: Parameters<typeof launchBrowser>[0], run: (browser: WidgetBrowser) => Promise<T>): Promise<T> {
  const browser = await launchBrowser(options);
  try {
    return await run(browser);
  } finally {
    await browser.close();
  }
}

/** Frames the widget's <video> decoded so far, and its picture size. */
export async function videoSnapshot(page: Page): Promise<{ decoded: number; width: number; height: number }> {
  return page.$eval('svc-agent', (el) => {
    const v = el.shadowRoot!.querySelector('video')!;
    return { decoded: v.getVideoPlaybackQuality().totalVideoFrames, width: v.videoWidth, height: v.videoHeight };
  });
}
