/**
 * Calls across a real NAT (issue 27), on the namespace network of test/support/nat-world.ts: the
 * visitor's chromium behind a masquerading home router, the server (`server/main.ts`) behind a 1:1
 * NAT, coturn on the public segment. Three ways through, each with its own server:
 *
 * - direct: `SVC_RTC_ANNOUNCED_ADDRESS` (no relay);
 * - TURN/UDP: `SVC_TURN_SECRET`, direct UDP dropped at the routers (only the relay carries media);
 * - TURN/TCP: the same, every UDP packet dropped at the home router (the visitor reaches coturn over TCP).
 *
 * Per way, SESSIONS sessions (after one unmeasured warm-up), each on a freshly loaded demo page:
 * - click -> first video frame (the widget's ConnectionTimingReport marks) and the ICE part of it
 *   (signalling joined -> ICE connected), p50 and p99 (with few sessions p99 is the worst one);
 * - held HOLD_S seconds after the first frame: the selected pair's RTT (getStats
 *   `currentRoundTripTime`, median of one sample a second; the relay's added latency is its RTT
 *   minus the direct one), the bitrate received, and coturn's CPU over the hold (/proc/<pid>/stat,
 *   % of one core for one live relayed session).
 *
 * A namespace network has no real distance: RTTs are sub-millisecond plus the relay's own work.
 * Needs root, iproute2, iptables, coturn, chromium. `NAT_BENCH_SESSIONS` overrides the count.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { canMakeTestHosts } from '../test/support/netns.ts';
import { NatWorld, selectedPair, SERVER_PUBLIC } from '../test/support/nat-world.ts';
import { events, speechWav, waitForEvent } from '../test/widget/browser.ts';
import { median, percentile, printJson, printTable } from './table.ts';

const SESSIONS = Number(process.env.NAT_BENCH_SESSIONS ?? 6);
const HOLD_S = 6;
/** Bounds that only catch hangs. */
const CONNECT_BOUND_MS = 30_000;

type Way = 'direct' | 'turn_udp' | 'turn_tcp';

interface Sample {
  firstFrameMs: number;
  iceMs: number;
  rttMs: number | null;
  kbps: number;
  coturnCpuPct: number | null;
  local: string;
  remote: string;
}

async function session(world: NatWorld, page: Page, measured: boolean): Promise<Sample | null> {
  await world.reload(page);
  await world.startConversation(page, 20);
  const report = await waitForEvent(page, (e) => e.name === 'ConnectionTimingReport' || (e.name === 'SvcSessionOutcome' && e.detail.outcome !== 'success'), CONNECT_BOUND_MS, 'the connection timing report');
  if (report.name !== 'ConnectionTimingReport') throw new Error(`the call did not connect: ${JSON.stringify(report.detail)}`);
  const { marks, durations } = report.detail;
  const sessionId = report.detail.sessionId as string;
  const cpu0 = world.coturn ? await world.coturn.cpuSeconds() : 0;
  const pair0 = await selectedPair(page);
  const started = Date.now();
  const rtts: number[] = [];
  for (let i = 0; i < HOLD_S; i++) {
    await new Promise((r) => setTimeout(r, 1000));
    const p = await selectedPair(page);
    if (p?.rttS !== null && p?.rttS !== undefined) rtts.push(p.rttS * 1000);
  }
  const pair1 = (await selectedPair(page))!;
  const heldS = (Date.now() - started) / 1000;
  const cpu1 = world.coturn ? await world.coturn.cpuSeconds() : 0;
  await page.locator('svc-agent').getByRole('button', { name: 'Hang up', exact: true }).click();
  await waitForEvent(page, (e) => e.name === 'SvcSessionOutcome' && e.detail.phase === 'session', 15_000, 'the session outcome');
  await world.waitForCall(sessionId, (c) => c.ended_at !== null, 20_000, 'the call to end');
  if (!measured) return null;
  const name = (c: typeof pair1.local) => (c ? `${c.type}${c.relayProtocol ? `/${c.relayProtocol}` : ''} ${c.address}` : '?');
  return {
    firstFrameMs: marks.firstVideoFrame - marks.startClicked,
    iceMs: durations.iceMs,
    rttMs: rtts.length ? median(rtts) : null,
    kbps: ((pair1.bytesReceived - (pair0?.bytesReceived ?? 0)) * 8) / 1000 / heldS,
    coturnCpuPct: world.coturn ? ((cpu1 - cpu0) / heldS) * 100 : null,
    local: name(pair1.local),
    remote: name(pair1.remote),
  };
}

async function measure(way: Way, microphone: string): Promise<Sample[]> {
  const world = await NatWorld.create({ turn: way !== 'direct' });
  try {
    if (way === 'turn_udp') await world.blockDirectUdp();
    if (way === 'turn_tcp') {
      await world.blockDirectUdp();
      await world.dropAllUdpAtHome();
    }
    const env: Record<string, string> = way === 'direct' ? { SVC_RTC_ANNOUNCED_ADDRESS: SERVER_PUBLIC } : { SVC_TURN_SECRET: world.coturn!.secret, SVC_TURN_URLS: `${world.coturn!.urls.udp},${world.coturn!.urls.tcp}` };
    await world.startServer(env);
    const { page } = await world.openVisitor(microphone);
    const samples: Sample[] = [];
    for (let i = 0; i <= SESSIONS; i++) {
      const s = await session(world, page, i > 0);
      if (s) samples.push(s);
    }
    const outcomes = (await events(page, 'SvcSessionOutcome')).filter((e) => e.detail.outcome !== 'success' && e.detail.outcome !== 'ended_by_visitor');
    if (outcomes.length) throw new Error(`unexpected outcomes: ${JSON.stringify(outcomes.map((e) => e.detail))}`);
    return samples;
  } finally {
    await world.close();
  }
}

const round = (v: number) => (Number.isFinite(v) ? Math.round(v * 10) / 10 : null);

export async function run(): Promise<void> {
  if (!(await canMakeTestHosts())) throw new Error('bench nat needs root and iproute2 (ip netns), iptables, coturn and chromium');
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-nat-'));
  const loadStart = loadavg()[0]!;
  try {
    const microphone = await speechWav([120_000], dir, 'silence.wav');
    const results: Record<Way, Sample[]> = { direct: [], turn_udp: [], turn_tcp: [] };
    for (const way of Object.keys(results) as Way[]) {
      console.log(`${way}: ${SESSIONS} sessions (+1 warm-up)...`);
      results[way] = await measure(way, microphone);
    }
    const rtt = (way: Way) => median(results[way].map((s) => s.rttMs).filter((v): v is number => v !== null));
    const rows = (Object.keys(results) as Way[]).map((way) => {
      const s = results[way];
      const cpu = s.map((x) => x.coturnCpuPct).filter((v): v is number => v !== null);
      return {
        way,
        sessions: String(s.length),
        'first frame p50 ms': percentile(s.map((x) => x.firstFrameMs), 50),
        'first frame p99 ms': percentile(s.map((x) => x.firstFrameMs), 99),
        'ice p50 ms': percentile(s.map((x) => x.iceMs), 50),
        'ice p99 ms': percentile(s.map((x) => x.iceMs), 99),
        'rtt ms': rtt(way),
        'relay adds ms': way === 'direct' ? 0 : rtt(way) - rtt('direct'),
        'kbit/s': median(s.map((x) => x.kbps)),
        'coturn cpu %': cpu.length ? median(cpu) : NaN,
        pair: `${s[0]?.local ?? '?'} -> ${s[0]?.remote ?? '?'}`,
      };
    });
    printTable(rows);
    const loadEnd = loadavg()[0]!;
    console.log(`load average (1 min): ${loadStart.toFixed(2)} at start, ${loadEnd.toFixed(2)} at end`);
    printJson('nat', {
      sessions: SESSIONS,
      hold_s: HOLD_S,
      ways: Object.fromEntries(rows.map((r) => [r.way, {
        first_frame_p50_ms: round(r['first frame p50 ms']),
        first_frame_p99_ms: round(r['first frame p99 ms']),
        ice_p50_ms: round(r['ice p50 ms']),
        ice_p99_ms: round(r['ice p99 ms']),
        rtt_ms: round(r['rtt ms']),
        relay_added_rtt_ms: round(r['relay adds ms']),
        kbps: Math.round(r['kbit/s']),
        coturn_cpu_pct_per_session: Number.isFinite(r['coturn cpu %']) ? Number(r['coturn cpu %'].toFixed(2)) : null,
        pair: r.pair,
      }])),
      load_start: Number(loadStart.toFixed(2)),
      load_end: Number(loadEnd.toFixed(2)),
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
