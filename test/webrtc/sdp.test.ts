/**
 * Short Opus packets (transports/webrtc/sdp.ts): the description edit itself, and its effect on
 * a real libwebrtc sender (@roamhq/wrtc): a second of audio leaves as about 100 packets instead
 * of about 50. Counted packets, not timed ones: the verdict does not depend on a quiet machine.
 */
import test from 'ava';
import { preferShortAudioPackets } from '../../transports/webrtc/sdp.ts';
import { wrtcWithSources } from '../../transports/webrtc/wrtc.ts';

const AUDIO_VIDEO = [
  'v=0', 'o=- 1 2 IN IP4 127.0.0.1', 's=-', 't=0 0', 'a=group:BUNDLE 0 1',
  'm=audio 9 UDP/TLS/RTP/SAVPF 111 0', 'c=IN IP4 0.0.0.0', 'a=mid:0', 'a=rtpmap:111 opus/48000/2', 'a=fmtp:111 minptime=20;useinbandfec=1', 'a=rtpmap:0 PCMU/8000', 'a=ptime:20',
  'm=video 9 UDP/TLS/RTP/SAVPF 96', 'c=IN IP4 0.0.0.0', 'a=mid:1', 'a=rtpmap:96 VP8/90000', 'a=fmtp:96 x-google-min-bitrate=100',
  '',
].join('\r\n');

test('the Opus section asks for 10 ms packets; everything else is left as it was', (t) => {
  const out = preferShortAudioPackets(AUDIO_VIDEO);
  const lines = out.split('\r\n');
  t.true(out.endsWith('\r\n'), 'CRLF kept, trailing line end kept');
  t.is(lines.filter((l) => l.startsWith('a=ptime:')).length, 1, 'one a=ptime, the old one replaced');
  t.true(lines.includes('a=ptime:10'));
  t.true(lines.includes('a=fmtp:111 minptime=10;useinbandfec=1'));
  const videoAt = lines.indexOf('m=video 9 UDP/TLS/RTP/SAVPF 96');
  t.true(lines.indexOf('a=ptime:10') < videoAt, 'a=ptime stays in the audio section');
  t.deepEqual(lines.slice(videoAt), AUDIO_VIDEO.split('\r\n').slice(AUDIO_VIDEO.split('\r\n').indexOf('m=video 9 UDP/TLS/RTP/SAVPF 96')), 'the video section is untouched');
  t.is(preferShortAudioPackets(out), out, 'applying it twice changes nothing more');
});

test('a description without Opus (or without audio) comes back unchanged; a bad ptime is refused', (t) => {
  const videoOnly = AUDIO_VIDEO.replace(/m=audio[\s\S]*?(?=m=video)/, '');
  t.is(preferShortAudioPackets(videoOnly), videoOnly);
  const pcmuOnly = AUDIO_VIDEO.replace('a=rtpmap:111 opus/48000/2\r\n', '');
  t.is(preferShortAudioPackets(pcmuOnly), pcmuOnly);
  t.throws(() => preferShortAudioPackets(AUDIO_VIDEO, 0), { instanceOf: RangeError });
  t.throws(() => preferShortAudioPackets(AUDIO_VIDEO, 12.5), { instanceOf: RangeError });
});

async function packetsForOneSecond(edit: boolean): Promise<number> {
  const { RTCPeerConnection, nonstandard } = wrtcWithSources();
  const a = new RTCPeerConnection();
  const b = new RTCPeerConnection();
  const source = new nonstandard.RTCAudioSource();
  const track = source.createTrack();
  try {
    a.addTrack(track);
    a.onicecandidate = (e) => { if (e.candidate) void b.addIceCandidate(e.candidate).catch(() => undefined); };
    b.onicecandidate = (e) => { if (e.candidate) void a.addIceCandidate(e.candidate).catch(() => undefined); };
    const connected = new Promise<void>((resolve) => {
      a.onconnectionstatechange = () => { if (a.connectionState === 'connected') resolve(); };
    });
    const offer = await a.createOffer();
    await a.setLocalDescription(offer);
    await b.setRemoteDescription(offer);
    const answer = await b.createAnswer();
    await b.setLocalDescription(answer);
    await a.setRemoteDescription({ type: 'answer', sdp: edit ? preferShortAudioPackets(answer.sdp!) : answer.sdp! });
    await connected;
    const before = await packetsSent(a);
    // One second of a loud tone (no silence suppression), 10 ms at a time, as fast as accepted:
    // the encoder packs by sample count, whatever the wall clock says.
    const tone = new Int16Array(480);
    for (let i = 0; i < tone.length; i++) tone[i] = Math.round(10_000 * Math.sin((2 * Math.PI * 440 * i) / 48_000));
    for (let n = 0; n < 100; n++) {
      source.onData({ samples: tone, sampleRate: 48_000, bitsPerSample: 16, channelCount: 1, numberOfFrames: 480 });
      await new Promise((r) => setTimeout(r, 10));
    }
    // Until the sender has sent what it was given (the count holds still over 200 ms): a fixed
    // 300 ms wait read a starved encoder's count before it caught up.
    let sent = await packetsSent(a);
    for (let waited = 0; waited < 5_000; waited += 200) {
      await new Promise((r) => setTimeout(r, 200));
      const now = await packetsSent(a);
      if (now === sent) break;
      sent = now;
    }
    return sent - before;
  } finally {
    track.stop();
    a.close();
    b.close();
  }
}

async function packetsSent(pc: RTCPeerConnection): Promise<number> {
  const report = await pc.getStats();
  let sent = 0;
  report.forEach((s: { type: string; kind?: string; mediaType?: string; packetsSent?: number }) => {
    if (s.type === 'outbound-rtp' && (s.kind ?? s.mediaType) === 'audio') sent += s.packetsSent ?? 0;
  });
  return sent;
}

test('a real libwebrtc sender follows it: one second of audio in about 100 packets instead of about 50', async (t) => {
  const withDefault = await packetsForOneSecond(false);
  const withShort = await packetsForOneSecond(true);
  t.log(`packets for 1 s of audio: default ${withDefault}, a=ptime:10 ${withShort}`);
  t.true(withDefault >= 40 && withDefault <= 60, `default: ${withDefault}`);
  t.true(withShort >= 85 && withShort <= 110, `short: ${withShort}`);
});
