/**
 * The network of issue 27, on one machine (network namespaces, test/support/netns.ts):
 *
 *   visitor 192.168.7.x ── home router ───────┐            ┌─── cloud router ── server 172.20.5.2
 *   (chromium)            masquerades as       │ internet   │    maps 198.51.100.21 1:1     (npm start)
 *                         198.51.100.10, drops ├─ 198.51.100/24 ─┤    to the server
 *                         unsolicited inbound  │            │
 *                                          coturn 198.51.100.30 (optional)
 *
 * The server runs `server/main.ts` (what `npm start` runs: embedded PGlite, filesystem storage,
 * offline engines, the demo agent and its page at `/`) on its private address; the visitor is a
 * real Debian chromium run inside its namespace that opens the demo page by the server's PUBLIC
 * address. The "internet" is a documentation range, which the server's candidate screen refuses
 * as it refuses any reserved range: only what the server admits by itself (its TURN servers) or
 * learns from checks (peer-reflexive) can be used, as on the real internet with a private visitor.
 *
 * Knobs for the cases: drop direct UDP between the two sides (at both routers, so only a relay
 * can carry media), drop all UDP at the home router (a TCP-only visitor), move the visitor to a
 * new address or flap its link. `visitor: 'lan'` puts the visitor on the server's own segment
 * instead (no NAT anywhere: the baseline). `close()` removes everything.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { CHROMIUM_BASE_ARGS, CHROMIUM_PATH } from './chromium.ts';
import { startCoturn, type Coturn, type CoturnOptions } from './coturn.ts';
import { TestNetwork, type Host, type Segment } from './netns.ts';
import type { GroupProcess } from './process-group.ts';
import { events, RECORD_EVENTS, videoSnapshot, waitForEvent, type RecordedEvent } from '../widget/browser.ts';
import { seedPgliteDir } from './pglite-template.ts';

export const SERVER_PUBLIC = '198.51.100.21';
export const HOME_PUBLIC = '198.51.100.10';
export const TURN_ADDRESS = '198.51.100.30';
export const SERVER_PORT = 8080;
/** The chain each router's case filters live in (flushed to lift them). */
const CHAIN = 'SVC_CASE';

export interface NatWorldOptions {
  /** `home` (default): behind the masquerading home router; `lan`: on the server's private segment, no NAT. */
  visitor?: 'home' | 'lan';
  /** Start coturn on the internet segment (options for it, or true). */
  turn?: boolean | CoturnOptions;
}

export interface SvcServer {
  readonly process: GroupProcess;
  /** The base URL the visitor uses (public address, or the private one for a LAN visitor). */
  readonly url: string;
  /** The first-start API key of the demo organization (printed once by npm start). */
  readonly apiKey: string;
  readonly demoAgentId: string;
  readonly dataDir: string;
}

export interface Visitor {
  readonly context: BrowserContext;
  readonly page: Page;
  close(): Promise<void>;
}

export class NatWorld {
  server: SvcServer | null = null;
  private visitors = new Set<Visitor>();
  private readonly scratch = mkdtempSync(join(tmpdir(), 'svc-nat-world-'));

  private constructor(
    readonly network: TestNetwork,
    readonly segments: { readonly internet: Segment; readonly home: Segment; readonly cloud: Segment },
    readonly hosts: { readonly visitor: Host; readonly home: Host; readonly cloud: Host; readonly server: Host; readonly turn: Host },
    readonly coturn: Coturn | null,
    readonly placement: 'home' | 'lan',
  ) {}

  static async create(options: NatWorldOptions = {}): Promise<NatWorld> {
    const network = await TestNetwork.create();
    try {
      const internet = await network.segment('internet', '198.51.100');
      const home = await network.segment('home', '192.168.7');
      const cloud = await network.segment('cloud', '172.20.5');
      const homeRouter = await network.host('homegw', { links: [{ segment: home, host: 1 }, { segment: internet, host: 10 }], router: true });
      const cloudRouter = await network.host('cloudgw', { links: [{ segment: cloud, host: 1 }, { segment: internet, host: 20 }], router: true });
      const server = await network.host('server', { links: [{ segment: cloud, host: 2 }], gateway: '172.20.5.1' });
      const placement = options.visitor ?? 'home';
      const visitor =
        placement === 'home'
          ? await network.host('visitor', { links: [{ segment: home, host: 2 }], gateway: '192.168.7.1' })
          : await network.host('visitor', { links: [{ segment: cloud, host: 50 }], gateway: '172.20.5.1' });
      const turn = await network.host('turn', { links: [{ segment: internet, host: 30 }] });
      await network.masquerade(homeRouter, internet);
      await network.mapOneToOne(cloudRouter, internet, SERVER_PUBLIC, server.address);
      for (const router of [homeRouter, cloudRouter]) {
        await router.exec(['iptables', '-N', CHAIN]);
        await router.exec(['iptables', '-I', 'FORWARD', '1', '-j', CHAIN]);
      }
      const coturn = options.turn ? await startCoturn(network, turn, options.turn === true ? {} : options.turn) : null;
      return new NatWorld(network, { internet, home, cloud }, { visitor, home: homeRouter, cloud: cloudRouter, server, turn }, coturn, placement);
    } catch (err) {
      await network.close();
      throw err;
    }
  }

  /** The base URL the visitor opens. */
  get baseUrl(): string {
    return this.placement === 'home' ? `http://${SERVER_PUBLIC}:${SERVER_PORT}` : `http://${this.hosts.server.address}:${SERVER_PORT}`;
  }

  /**
   * Starts `server/main.ts` in the server's namespace on its private address, with a fresh data
   * dir, `PUBLIC_BASE_URL` = the address the visitor uses, and `env` (the case's settings).
   */
  async startServer(env: Record<string, string> = {}, readyTimeoutMs = 60_000): Promise<SvcServer> {
    if (this.server) throw new Error('a server is already running in this world');
    const dataDir = mkdtempSync(join(this.scratch, 'data-'));
    await seedPgliteDir(join(dataDir, 'pglite')); // the embedded database without initdb's seconds
    const started = this.network.spawnEntryPoint(
      this.hosts.server,
      'server/main.ts',
      {
        HOST: this.hosts.server.address,
        PORT: String(SERVER_PORT),
        SVC_DATA_DIR: dataDir,
        PUBLIC_BASE_URL: this.baseUrl,
        // What `npm start` runs: the embedded database (a DATABASE_URL of the test run, pointing at
        // the machine's loopback, would not even be reachable from the namespace).
        DATABASE_URL: '',
        LOG_LEVEL: 'warn',
        ...env,
      },
      (out) => /Demo page:.*\n[\s\S]*shown only this once\):\n\s+\S+\n/.test(out),
      'svc server',
    );
    const timeout = new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`svc server not ready after ${readyTimeoutMs} ms:\n${started.process.output}`)), readyTimeoutMs).unref());
    await Promise.race([started.ready, timeout]);
    const apiKey = /shown only this once\):\n\s+(\S+)/.exec(started.process.output)![1]!;
    if (/no demo agent/.test(started.process.output)) throw new Error(`the server has no demo agent:\n${started.process.output}`);
    const partial = { process: started.process, url: this.baseUrl, apiKey, dataDir, demoAgentId: '' };
    this.server = partial;
    const agents = await this.api('GET', '/v1/agents?limit=100');
    const demo = (agents.data as any[]).find((a) => a.title === 'Ada (demo)');
    if (!demo) throw new Error(`no demo agent in ${JSON.stringify(agents)}`);
    this.server = { ...partial, demoAgentId: demo.agent_id as string };
    return this.server;
  }

  /** SIGTERM (the server's own shutdown), SIGKILL after `graceMs`. */
  async stopServer(graceMs = 15_000): Promise<number | null> {
    const server = this.server;
    if (!server) return null;
    this.server = null;
    server.process.kill('SIGTERM');
    const timer = setTimeout(() => server.process.kill('SIGKILL'), graceMs);
    const code = await server.process.exited;
    clearTimeout(timer);
    rmSync(server.dataDir, { recursive: true, force: true });
    return code;
  }

  /** A REST call to the server from inside its namespace (curl), with the demo organization's key. */
  async api(method: string, path: string): Promise<any> {
    if (!this.server) throw new Error('no server');
    const url = `http://${this.hosts.server.address}:${SERVER_PORT}${path}`;
    const out = await this.hosts.server.exec(['curl', '-sS', '--max-time', '10', '-X', method, '-H', `X-API-Key: ${this.server.apiKey}`, url]);
    return JSON.parse(out);
  }

  /** Every call record of the demo agent. */
  async calls(): Promise<any[]> {
    return (await this.api('GET', `/v1/agents/${this.server!.demoAgentId}/calls?limit=100`)).data as any[];
  }

  async callRecord(sessionId: string): Promise<any> {
    return (await this.calls()).find((c) => c.session_id === sessionId);
  }

  /** Waits (polling the REST API) until `predicate` holds for the call record of `sessionId`. */
  async waitForCall(sessionId: string, predicate: (call: any) => boolean, ms = 20_000, what = 'the call record'): Promise<any> {
    const deadline = Date.now() + ms;
    let last: any;
    for (;;) {
      last = await this.callRecord(sessionId);
      if (last && predicate(last)) return last;
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} of ${sessionId}; last: ${JSON.stringify(last)}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  }

  /**
   * A chromium inside the visitor's namespace with a fake microphone playing `microphone` (a WAV),
   * on the demo page (`RECORD_EVENTS` and `RECORD_PEER_CONNECTIONS` installed). The page is plain
   * http on a public address: chromium is told to treat that origin as secure (getUserMedia), as
   * an https deployment would be.
   */
  async openVisitor(microphone: string): Promise<Visitor> {
    if (!this.server) throw new Error('start the server first');
    const profile = mkdtempSync(join(this.scratch, 'chromium-'));
    const context = await chromium.launchPersistentContext(profile, {
      executablePath: this.network.wrapper(this.hosts.visitor, CHROMIUM_PATH),
      headless: true,
      args: [
        ...CHROMIUM_BASE_ARGS,
        '--use-fake-device-for-media-stream',
        '--use-fake-ui-for-media-stream',
        `--use-file-for-fake-audio-capture=${microphone}`,
        `--unsafely-treat-insecure-origin-as-secure=${this.baseUrl}`,
      ],
      viewport: { width: 1000, height: 800 },
    });
    let closed = false;
    const visitor: Visitor = {
      context,
      page: await context.newPage(),
      close: async () => {
        if (closed) return;
        closed = true;
        this.visitors.delete(visitor);
        await context.close().catch(() => undefined);
        rmSync(profile, { recursive: true, force: true });
      },
    };
    this.visitors.add(visitor);
    try {
      const { page } = visitor;
      await page.addInitScript(RECORD_EVENTS);
      await page.addInitScript(RECORD_PEER_CONNECTIONS);
      await this.reload(page);
    } catch (err) {
      await visitor.close();
      throw err;
    }
    return visitor;
  }

  /** Loads the demo page again in `page` (a fresh widget, the recorders reinstalled). */
  async reload(page: Page): Promise<void> {
    await page.goto(`${this.baseUrl}/`);
    await page.waitForFunction(() => (document.querySelector('svc-agent') as HTMLElement | null)?.dataset.record === 'loaded', undefined, { timeout: 20_000 });
  }

  /** Sets the widget's setup timeout (`connect-timeout`, seconds) and clicks its start button. */
  async startConversation(page: Page, connectTimeoutS?: number): Promise<void> {
    if (connectTimeoutS !== undefined) await page.$eval('svc-agent', (el, s) => el.setAttribute('connect-timeout', String(s)), connectTimeoutS);
    await page.locator('svc-agent').getByRole('button', { name: 'Start conversation', exact: true }).click();
  }

  /** Drops UDP between the visitor's side and the server's side at both routers: only a relay can carry media. */
  async blockDirectUdp(): Promise<void> {
    const far = this.placement === 'home' ? HOME_PUBLIC : this.hosts.visitor.address;
    await this.hosts.home.exec(['iptables', '-A', CHAIN, '-p', 'udp', '-d', SERVER_PUBLIC, '-j', 'DROP']);
    await this.hosts.home.exec(['iptables', '-A', CHAIN, '-p', 'udp', '-s', SERVER_PUBLIC, '-j', 'DROP']);
    await this.hosts.cloud.exec(['iptables', '-A', CHAIN, '-p', 'udp', '-s', far, '-j', 'DROP']);
    await this.hosts.cloud.exec(['iptables', '-A', CHAIN, '-p', 'udp', '-d', far, '-j', 'DROP']);
  }

  /** Drops every UDP packet the home router would forward: the visitor has TCP only. */
  async dropAllUdpAtHome(): Promise<void> {
    await this.hosts.home.exec(['iptables', '-A', CHAIN, '-p', 'udp', '-j', 'DROP']);
  }

  /** Lifts the case's filters (blockDirectUdp, dropAllUdpAtHome). */
  async clearFilters(): Promise<void> {
    for (const router of [this.hosts.home, this.hosts.cloud]) await router.exec(['iptables', '-F', CHAIN]);
  }

  /** Packets dropped by the case's filters at a router so far (proof a filter was exercised). */
  async droppedPackets(router: 'home' | 'cloud'): Promise<number> {
    const out = await this.hosts[router].exec(['iptables', '-L', CHAIN, '-v', '-n', '-x']);
    return out.split('\n').filter((l) => /\bDROP\b/.test(l)).reduce((sum, l) => sum + Number(l.trim().split(/\s+/)[0] ?? 0), 0);
  }

  /** Moves the visitor to a new address on its segment (its old sockets die); returns the new address. */
  async moveVisitor(): Promise<string> {
    const segment = this.placement === 'home' ? this.segments.home : this.segments.cloud;
    return this.network.readdress(this.hosts.visitor, segment);
  }

  /** Takes the visitor's link down for `ms`, then up again. */
  async flapVisitor(ms: number): Promise<void> {
    await this.network.setLinks(this.hosts.visitor, false);
    await new Promise((r) => setTimeout(r, ms));
    await this.network.setLinks(this.hosts.visitor, true);
  }

  /** UDP sockets in the server's namespace: `ss -uanp` rows as {local port, process ids}. */
  async serverUdpSockets(): Promise<{ local: string; port: number; pids: number[] }[]> {
    const out = await this.hosts.server.exec(['ss', '-uanpH']);
    return out
      .split('\n')
      .filter((l) => l.trim())
      .map((l) => {
        const cols = l.trim().split(/\s+/);
        const local = cols[3]!;
        const pids = [...l.matchAll(/pid=(\d+)/g)].map((m) => Number(m[1]));
        return { local, port: Number(local.slice(local.lastIndexOf(':') + 1)), pids };
      });
  }

  async close(): Promise<void> {
    for (const v of [...this.visitors]) await v.close();
    await this.stopServer(5_000).catch(() => undefined);
    await this.coturn?.close().catch(() => undefined);
    await this.network.close();
    rmSync(this.scratch, { recursive: true, force: true });
  }
}

/**
 * Records every RTCPeerConnection the page makes (the widget bundles its room client and keeps its
 * peer connection private) in `window.__pcs`, and the configuration each got in `window.__pcConfigs`.
 * Calls through, changes nothing.
 */
export const RECORD_PEER_CONNECTIONS = `
(() => {
  const Native = window.RTCPeerConnection;
  if (!Native) return;
  window.__pcs = [];
  window.__pcConfigs = [];
  class Recorded extends Native {
    constructor(config, ...rest) {
      super(config, ...rest);
      this.__remoteUfrags = [];
      window.__pcs.push(this);
      window.__pcConfigs.push(JSON.parse(JSON.stringify(config || {})));
    }
    setRemoteDescription(description, ...rest) {
      const m = /a=ice-ufrag:(\\S+)/.exec((description && description.sdp) || '');
      if (m) this.__remoteUfrags.push(m[1]);
      return super.setRemoteDescription(description, ...rest);
    }
  }
  window.RTCPeerConnection = Recorded;
})();
`;

export interface CandidateInfo {
  readonly type: string;
  readonly address: string | null;
  readonly port: number;
  readonly protocol: string;
  readonly relayProtocol: string | null;
  readonly url: string | null;
}

export interface SelectedPair {
  readonly connectionState: string;
  readonly peerConnections: number;
  readonly local: CandidateInfo | null;
  readonly remote: CandidateInfo | null;
  /** Seconds, from the pair's STUN consent checks. */
  readonly rttS: number | null;
  readonly bytesReceived: number;
}

/**
 * The selected candidate pair of the page's latest peer connection, from getStats. (A string, not
 * a function: tsx's helpers for nested arrow functions do not exist in the page.)
 */
export async function selectedPair(page: Page): Promise<SelectedPair | null> {
  return page.evaluate(SELECTED_PAIR) as Promise<SelectedPair | null>;
}

const SELECTED_PAIR = `(async () => {
  const pcs = window.__pcs;
  const pc = pcs && pcs[pcs.length - 1];
  if (!pc) return null;
  const stats = await pc.getStats();
  let pair;
  stats.forEach((s) => { if (s.type === 'transport' && s.selectedCandidatePairId) pair = stats.get(s.selectedCandidatePairId); });
  if (!pair) stats.forEach((s) => { if (s.type === 'candidate-pair' && s.nominated && s.state === 'succeeded') pair = s; });
  const info = (c) => (c ? { type: c.candidateType, address: c.address ?? c.ip ?? null, port: c.port, protocol: c.protocol, relayProtocol: c.relayProtocol ?? null, url: c.url ?? null } : null);
  return {
    connectionState: pc.connectionState,
    peerConnections: pcs.length,
    local: pair ? info(stats.get(pair.localCandidateId)) : null,
    remote: pair ? info(stats.get(pair.remoteCandidateId)) : null,
    rttS: pair && pair.currentRoundTripTime !== undefined ? pair.currentRoundTripTime : null,
    bytesReceived: pair ? pair.bytesReceived : 0,
  };
})()`;

/** Per peer connection of the page, the ICE ufrag of each remote description it was given (a new one: an ICE restart). */
export async function remoteUfrags(page: Page): Promise<string[][]> {
  return page.evaluate('(window.__pcs || []).map((pc) => pc.__remoteUfrags.slice())') as Promise<string[][]>;
}

/** Every candidate pair of the page's latest peer connection: what ICE tried and how it went. */
export async function candidatePairs(page: Page): Promise<{ state: string; requestsSent: number; responsesReceived: number; local: string; remote: string }[]> {
  return page.evaluate(CANDIDATE_PAIRS) as Promise<{ state: string; requestsSent: number; responsesReceived: number; local: string; remote: string }[]>;
}

const CANDIDATE_PAIRS = `(async () => {
  const pcs = window.__pcs;
  const pc = pcs && pcs[pcs.length - 1];
  if (!pc) return [];
  const stats = await pc.getStats();
  const name = (c) => (c ? c.candidateType + ' ' + (c.address ?? c.ip) + ':' + c.port + '/' + c.protocol : '?');
  const out = [];
  stats.forEach((s) => {
    if (s.type === 'candidate-pair') out.push({ state: s.state, requestsSent: s.requestsSent ?? 0, responsesReceived: s.responsesReceived ?? 0, local: name(stats.get(s.localCandidateId)), remote: name(stats.get(s.remoteCandidateId)) });
  });
  return out;
})()`;

/** The RTCConfiguration each peer connection of the page was made with (the iceServers the page was given). */
export async function peerConnectionConfigs(page: Page): Promise<RTCConfiguration[]> {
  return page.evaluate(() => ((window as any).__pcConfigs ?? []) as RTCConfiguration[]);
}

export interface Conversation {
  readonly sessionId: string;
  readonly connected: RecordedEvent;
  readonly greeting: string;
  readonly question: string;
  readonly answer: string;
  /** Loudest bot level the page measured on the received audio. */
  readonly botVolume: number;
  /** Video frames decoded when the answer came, and 10+ frames later. */
  readonly frames: readonly [number, number];
}

/** Waits for the widget's connect outcome; throws with its detail unless it is `success`. */
export async function connectOutcome(page: Page, ms = 60_000): Promise<RecordedEvent> {
  const outcome = await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'connect', ms, 'the connect outcome');
  return outcome;
}

/**
 * A whole exchange after the start click: connected, the greeting heard (bot audio level at the
 * page), the question heard by the bot (the user turn), an answer, and video frames decoding.
 */
export async function converse(page: Page, options: { question?: string; ms?: number } = {}): Promise<Conversation> {
  const ms = options.ms ?? 40_000;
  const connected = await connectOutcome(page, ms);
  if (connected.detail.outcome !== 'success') throw new Error(`the call did not connect: ${JSON.stringify(connected.detail)}`);
  const greeting = await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'bot', ms, 'the greeting turn');
  await waitForEvent(page, (e) => e.name === 'botVolume' && e.detail.volume > 0.01, ms, 'bot audio at the page');
  const question = await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'user', ms, 'the user turn');
  const answer = await waitForEvent(page, (e) => e.name === 'ReceivedTranscriptTurn' && e.detail.owner === 'bot' && e.at > question.at, ms, 'the answer turn');
  const frames = await framesAdvance(page, 10, ms);
  const volumes = (await events(page, 'botVolume')).map((e) => e.detail.volume as number);
  return {
    sessionId: connected.detail.sessionId,
    connected,
    greeting: greeting.detail.text,
    question: question.detail.text,
    answer: answer.detail.text,
    botVolume: Math.max(0, ...volumes),
    frames,
  };
}

/** Waits until the widget's <video> decoded `count` more frames; returns [before, after]. Throws if it does not within `ms`. */
export async function framesAdvance(page: Page, count: number, ms = 30_000): Promise<[number, number]> {
  const before = (await videoSnapshot(page)).decoded;
  let now = before;
  for (const deadline = Date.now() + ms; now < before + count; ) {
    if (Date.now() > deadline) throw new Error(`video frames did not advance by ${count} within ${ms} ms (${before} -> ${now})`);
    await new Promise((r) => setTimeout(r, 100));
    now = (await videoSnapshot(page)).decoded;
  }
  return [before, now];
}
