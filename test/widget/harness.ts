/**
 * Real parts for the widget tests: the server as `npm start` composes it (REST API, embedded
 * rooms, the Session API with the in-process BotRunner on the offline engines and the
 * human-portrait face, and the widget module serving the script and the demo page), a real
 * Debian chromium (playwright-core) whose fake microphone plays a WAV spoken by the offline
 * espeak TTS, and helpers that read the widget's events from the page.
 */
import { facePlugin } from '../../plugins/face/index.ts';
import { DEFAULT_STT_PHRASES, localPlugin } from '../../plugins/local/index.ts';
import type { Middleware } from 'koa';
import { pino } from 'pino';
import { warmEngines } from '../../server/build-server.ts';
import { createCapacityGate, type CapacityGate } from '../../server/capacity/index.ts';
import type { MountedRooms } from '../../server/rooms/mount.ts';
import type { EmbeddedSessions } from '../../server/sessions/embedded-sessions.ts';
import type { MountedWidget } from '../../server/widget/index.ts';
import { startTestServer, type TestServer } from '../server/harness.ts';
import { until } from '../../testing/until.ts';

export { CHROMIUM_PATH, clickButton, events, launchBrowser, OBSERVE_MICROPHONE, RECORD_EVENTS, speechWav, videoSnapshot, waitForEvent, widgetView, withBrowser, type RecordedEvent, type WidgetBrowser } from './browser.ts';
export { startCustomerSite, type CustomerSite } from './customer-site.ts';

/** The phrase that makes the offline responder call the client tool `open_page`. */
export const TOOL_PHRASE = 'Call tool open page with page pricing';

export interface WidgetServer extends TestServer {
  readonly rooms: MountedRooms;
  readonly live: EmbeddedSessions;
  readonly widget: MountedWidget;
  /** Creates and publishes an agent (allowed_hostnames `*` unless given); returns its id. */
  agent(fields?: Record<string, unknown>): Promise<string>;
  demoAgentId: string | null;
  /** Release requests (`POST /v1/public/agents/connect/{room}`) the server received, in order, with the browser's `Sec-Fetch-Mode` (`no-cors`: a beacon; `cors`: fetch). */
  readonly releases: { room: string; mode: string | undefined }[];
  /**
   * The process's capacity gate (the real one, as `npm start` mounts it): roomy by default; a test
   * sets a small one to make the Session API answer 503 `server_busy`, and puts the default back.
   */
  capacity: CapacityGate;
  readonly defaultCapacity: CapacityGate;
  /** The call record of a session (through the REST API), or undefined. */
  callRecord(agentId: string, sessionId: string): Promise<any>;
  /** Waits (up to `ms`) until the server ended the session's call (released, hung up, ...); returns it. */
  callEnded(agentId: string, sessionId: string, ms?: number): Promise<any>;
}

/**
 * `livekit`: sessions run in rooms of this LiveKit server (the local fake, test/fakes/livekit-server.ts)
 * instead of embedded rooms, its loopback address opened as an operator would (SVC_LIVEKIT_ALLOWED_RANGES).
 */
export async function startWidgetServer(label = 'widget', options: { livekit?: { url: string; apiKey: string; apiSecret: string } } = {}): Promise<WidgetServer> {
  // The capacity gate as npm start runs it (slots and the late-frame check), with room for every
  // session a widget test opens; a test swaps in a small one to see `server_busy`.
  const defaultCapacity = createCapacityGate({ limit: 64 });
  let capacity = defaultCapacity;
  let demoAgentId: string | null = null;
  // Observes (does not answer) the release requests reaching the server.
  const releases: { room: string; mode: string | undefined }[] = [];
  const observeReleases: Middleware = (ctx, next) => {
    const m = /^\/v1\/public\/agents\/connect\/([^/?]+)/.exec(ctx.path);
    if (ctx.method === 'POST' && m) releases.push({ room: decodeURIComponent(m[1]!), mode: ctx.get('sec-fetch-mode') || undefined });
    return next();
  };
  const livekit = options.livekit ? { url: options.livekit.url, apiKey: options.livekit.apiKey, apiSecret: options.livekit.apiSecret } : null;
  const ts = await startTestServer({
    label,
    plugins: [localPlugin, facePlugin],
    // The server as npm start assembles it, with the deployment's LiveKit server when given.
    config: { ...(livekit ? { livekitAllowedRanges: ['127.0.0.0/8'] } : {}), sessions: { livekit } },
    surfaces: { sessions: true, rooms: true, widget: true },
    parts: {
      middleware: [observeReleases],
      widget: { demoAgentId: () => demoAgentId },
      sessions: {
        // Each lease comes from (and goes back to) the gate set when the session was admitted.
        capacity: { tryAcquire: () => capacity.tryAcquire(), wouldRefuse: () => capacity.wouldRefuse(), recordRefusal: (reason) => capacity.recordRefusal(reason) },
        shutdownTimeoutMs: 5_000,
        providers: { stt: 'local', llm: 'local', vad: 'local', options: { 'stt:local': { phrases: [...DEFAULT_STT_PHRASES.en!, TOOL_PHRASE] } } },
        runner: { tuning: { vadOptions: { stopMs: 500 } }, logger: { info: () => undefined, warn: () => undefined } },
      },
    },
  });
  // The engines warmed as npm start warms them before it says ready (server/main.ts): the first
  // session must not pay for eSpeak's worker and WASM (under a CPU hog, seconds before a greeting).
  await warmEngines(ts.server.registry, pino({ level: 'silent' }), { webrtc: true, stt: 'local' });
  const handle = ts as WidgetServer;
  const rooms = ts.server.rooms!;
  const live = ts.server.sessions!;
  const widget = ts.server.widget!;
  const stop = ts.stop.bind(ts);
  Object.defineProperty(handle, 'capacity', { get: () => capacity, set: (gate: CapacityGate) => (capacity = gate), enumerable: true });
  Object.defineProperty(handle, 'demoAgentId', { get: () => demoAgentId, set: (id: string | null) => (demoAgentId = id), enumerable: true });
  return Object.assign(handle, {
    releases,
    defaultCapacity,
    rooms,
    live,
    widget,
    async agent(fields: Record<string, unknown> = {}) {
      const created = await ts.call('POST', '/v1/agents', { body: { title: (fields.title as string | undefined) ?? 'Ada' } });
      if (created.status !== 201) throw new Error(created.text);
      const id = created.body.agent_id as string;
      const patched = await ts.call('PATCH', `/v1/agents/${id}`, { body: { allowed_hostnames: ['*'], tts_provider: 'local', ...fields } });
      if (patched.status !== 200) throw new Error(patched.text);
      const published = await ts.call('PATCH', `/v1/agents/${id}/status`, { body: { status: 'published' } });
      if (published.status !== 200) throw new Error(published.text);
      return id;
    },
    async callRecord(agentId: string, sessionId: string) {
      const calls = await ts.call('GET', `/v1/agents/${agentId}/calls?limit=100`);
      return (calls.body.data as any[]).find((c) => c.session_id === sessionId);
    },
    callEnded(agentId: string, sessionId: string, ms = 15_000) {
      return until(async () => {
        const c = await handle.callRecord(agentId, sessionId);
        return c && c.ended_at ? c : undefined;
      }, { timeoutMs: ms, intervalMs: 100, what: `the call record of ${sessionId} to end` });
    },
    async stop() {
      await stop();
      defaultCapacity.close();
    },
  });
}

