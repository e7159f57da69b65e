/**
 * The floor one WebRTC audio hop puts under every turn: two libwebrtc peer connections in this
 * process (@roamhq/wrtc, the library of the bot and of the bench's visitors) over loopback, one
 * sending 16 kHz mono in 10 ms chunks paced by the clock, the other reading what it decodes
 * (RTCAudioSink). Every 400 ms the sender switches from silence to a loud tone; the figure is
 * the time from handing that first loud 10 ms to the source to the sink's first loud 10 ms
 * (Opus packetisation, loopback, the receiver's jitter buffer and its 10 ms playout pull).
 *
 * Two packetisations are compared: Opus's default 20 ms frames and 10 ms frames (`a=ptime:10`
 * in the description the sender applies, which is how our rooms ask for it: see
 * transports/webrtc/sdp.ts). The sessions bench's uplink and downlink stages are this hop plus
 * what our own code adds around it.
 */
import { wrtcWithSources } from '../transports/webrtc/wrtc.ts';
import { preferShortAudioPackets } from '../transports/webrtc/sdp.ts';
import { percentile, printTable } from './table.ts';

const RATE = 16_000;
const CHUNK = RATE / 100;

interface HopResult { readonly label: string; readonly delays: number[] }

async function measure(label: string, shortPackets: boolean, clicks: number, burst = 1): Promise<HopResult> {
  const w = wrtcWithSources();
  const { RTCPeerConnection, nonstandard } = w;
  const a = new RTCPeerConnection();
  const b = new RTCPeerConnection();
  const source = new nonstandard.RTCAudioSource();
  const track = source.createTrack();
  a.addTrack(track);
  a.onicecandidate = (e) => { if (e.candidate) void b.addIceCandidate(e.candidate); };
  b.onicecandidate = (e) => { if (e.candidate) void a.addIceCandidate(e.candidate); };
  let loudAt: number[] = [];
  let heardAt: number[] = [];
  let inLoud = false;
  const sinkReady = new Promise<void>((resolve) => {
    b.ontrack = (event) => {
      const sink = new nonstandard.RTCAudioSink(event.track);
      sink.ondata = (d: { samples: Int16Array }) => {
        const s = d.samples as Int16Array;
        let peak = 0;
        for (let i = 0; i < s.length; i++) peak = Math.max(peak, Math.abs(s[i]!));
        const loud = peak > 3000;
        if (loud && !inLoud) heardAt.push(performance.now());
        inLoud = loud;
      };
      stops.push(() => sink.stop());
      resolve();
    };
  });
  const stops: (() => void)[] = [];
  const offer = await a.createOffer();
  await a.setLocalDescription(offer);
  await b.setRemoteDescription(offer);
  const answer = await b.createAnswer();
  await b.setLocalDescription(answer);
  await a.setRemoteDescription({ type: 'answer', sdp: shortPackets ? preferShortAudioPackets(answer.sdp!) : answer.sdp! });
  await sinkReady;

  const silent = new Int16Array(CHUNK);
  const tone = new Int16Array(CHUNK);
  for (let i = 0; i < CHUNK; i++) tone[i] = Math.round(12_000 * Math.sin((2 * Math.PI * 440 * i) / RATE));
  const periodChunks = 40; // 400 ms: 100 ms of tone, 300 ms of silence
  const warmupChunks = 100;
  const total = warmupChunks + clicks * periodChunks;
  const t0 = performance.now();
  for (let n = 0; n < total; n++) {
    // burst > 1: `burst` chunks handed over at once every burst * 10 ms (as a 40 ms face frame's audio).
    const due = t0 + Math.floor(n / burst) * burst * 10;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const phase = n < warmupChunks ? -1 : (n - warmupChunks) % periodChunks;
    const loud = phase >= 0 && phase < 10;
    if (phase === 0) loudAt.push(performance.now());
    source.onData({ samples: loud ? tone : silent, sampleRate: RATE, bitsPerSample: 16, channelCount: 1, numberOfFrames: CHUNK });
  }
  await new Promise((r) => setTimeout(r, 300));
  for (const s of stops) s();
  track.stop();
  a.close();
  b.close();
  // Pair each click with the first loud chunk heard after it (and before the next click).
  const delays: number[] = [];
  for (let i = 0; i < loudAt.length; i++) {
    const next = loudAt[i + 1] ?? Infinity;
    const heard = heardAt.find((h) => h >= loudAt[i]! && h < next);
    if (heard !== undefined) delays.push(heard - loudAt[i]!);
  }
  loudAt = [];
  heardAt = [];
  return { label, delays };
}

export async function run(): Promise<void> {
  const clicks = Number(process.env.AUDIO_HOP_CLICKS ?? 50);
  // Short packets first: whichever runs first meets a colder process (JIT, first allocations).
  const only = process.env.AUDIO_HOP_ONLY;
  const short = only === 'default' ? { label: 'Opus 10 ms packets (a=ptime:10)', delays: [] } : await measure('Opus 10 ms packets (a=ptime:10)', true, clicks);
  const dflt = only === 'short' ? { label: 'Opus 20 ms packets (default)', delays: [] } : await measure('Opus 20 ms packets (default)', false, clicks);
  const burst = only === 'burst' ? await measure('Opus 10 ms packets, audio in 40 ms bursts', true, clicks, 4) : undefined;
  const results = burst ? [burst] : [dflt, short];
  printTable(results.map((r) => ({
    packetisation: r.label,
    'clicks heard': `${r.delays.length}/${clicks}`,
    'p50 ms': percentile(r.delays, 50).toFixed(1),
    'p90 ms': percentile(r.delays, 90).toFixed(1),
    'p99 ms': percentile(r.delays, 99).toFixed(1),
  })));
  if (burst) {
    console.log(JSON.stringify({ bench: 'audio_hop', clicks, burst40_p50_ms: +percentile(burst.delays, 50).toFixed(1), burst40_p99_ms: +percentile(burst.delays, 99).toFixed(1) }));
    return;
  }
  const [d, s] = results as [HopResult, HopResult];
  console.log(JSON.stringify({
    bench: 'audio_hop',
    clicks,
    default_p50_ms: +percentile(d.delays, 50).toFixed(1),
    default_p99_ms: +percentile(d.delays, 99).toFixed(1),
    ptime10_p50_ms: +percentile(s.delays, 50).toFixed(1),
    ptime10_p99_ms: +percentile(s.delays, 99).toFixed(1),
  }));
}
