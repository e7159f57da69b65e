import test from 'ava';
import { chunkAudio, concat, frame, signal, silence, VirtualClock, type Frame } from '../../core/index.ts';
import { frameTypes, runProcessorTest, type TestStep } from '../../core/testing/index.ts';
import { VADProcessor } from '../../processors/vad/vad-processor.ts';
import { STTProcessor } from '../../processors/stt/stt-processor.ts';
import { EnergyVAD, ScriptedSTT, speech } from './scripted-services.ts';

/** 20 ms input-audio frames for `pcm`, each followed by 20 ms of clock time. */
function audioSteps(pcm: Int16Array, rate = 16_000): TestStep[] {
  return [...chunkAudio(pcm, rate, 20)].flatMap((c) => [frame('input-audio', { pcm: c, sampleRate: rate, channels: 1 }), { sleepMs: 20 }]);
}

const speakingTypes = (frames: Frame[]) => frameTypes(frames).filter((t) => t.startsWith('vad-speech') || t.startsWith('user-') || t === 'interruption-request');

test('VAD: speech longer than startMs is reported started; silence longer than stopMs, stopped (with that silence)', async (t) => {
  const vad = new VADProcessor(new EnergyVAD(), { startMs: 200, stopMs: 600 });
  const { downstream } = await runProcessorTest(vad, audioSteps(concat([silence(200, 16_000), speech(1000), silence(800, 16_000)])));
  t.deepEqual(speakingTypes(downstream), ['vad-speech-started', 'vad-speech-stopped']);
  t.like(downstream.find((f) => f.type === 'vad-speech-stopped'), { silenceMs: 600 });
});

test('VAD: a blip shorter than startMs is not speech, a pause shorter than stopMs does not stop it', async (t) => {
  const vad = new VADProcessor(new EnergyVAD(), { startMs: 200, stopMs: 600 });
  const pcm = concat([speech(100), silence(300, 16_000), speech(500), silence(400, 16_000), speech(500), silence(700, 16_000)]);
  const { downstream } = await runProcessorTest(vad, audioSteps(pcm));
  t.deepEqual(speakingTypes(downstream), ['vad-speech-started', 'vad-speech-stopped']);
});

test('VAD: input audio at another sample rate is resampled for the analyzer', async (t) => {
  const vad = new VADProcessor(new EnergyVAD(), { startMs: 100, stopMs: 300 });
  const { downstream } = await runProcessorTest(vad, audioSteps(concat([speech(500, 48_000), silence(500, 48_000)]), 48_000));
  t.deepEqual(speakingTypes(downstream), ['vad-speech-started', 'vad-speech-stopped']);
});

test('VAD: it starts no turn and interrupts nobody, even over the bot (the turn processor decides)', async (t) => {
  const vad = new VADProcessor(new EnergyVAD(), { startMs: 100 });
  const { upstream, downstream } = await runProcessorTest(vad, [{ upstream: signal('bot-started-speaking') }, ...audioSteps(speech(300))], { allowInterruptions: true });
  t.deepEqual(speakingTypes(upstream), []);
  t.deepEqual(speakingTypes(downstream), ['vad-speech-started']);
});

test('STT: final and interim transcripts become transcription frames in the agent language', async (t) => {
  const clock = new VirtualClock();
  const service = new ScriptedSTT(clock, ['bonjour tout le monde']);
  const stt = new STTProcessor(service, { language: 'fr' });
  const { downstream } = await runProcessorTest(stt, [...audioSteps(speech(200)), frame('vad-speech-stopped', { silenceMs: 200 }), { sleepMs: 200 }], { clock });
  const transcripts = downstream.flatMap((f) => (f.type === 'transcription' ? [[f.text, f.final, f.language]] : []));
  t.deepEqual(transcripts, [
    ['bonjour', false, 'fr'],
    ['bonjour tout le monde', true, 'fr'],
  ]);
  t.is(service.connections[0]!.options.language, 'fr');
  t.is(service.connections[0]!.samples, 3200);
  t.true(service.connections[0]!.closed, 'closed when the pipeline ends');
});

test('STT: after a dropped connection it reconnects and replays audio not yet transcribed', async (t) => {
  const clock = new VirtualClock();
  const service = new ScriptedSTT(clock, ['first', 'second']);
  const stt = new STTProcessor(service, { reconnectBaseMs: 100 });
  await runProcessorTest(
    stt,
    [...audioSteps(speech(100)), frame('vad-speech-stopped', { silenceMs: 200 }), { sleepMs: 200 }, ...audioSteps(speech(200))],
    { clock, sendEnd: false },
  );
  service.drop();
  await clock.advance(150);
  t.is(stt.reconnects, 1);
  t.is(service.connections.length, 2);
  t.is(service.connections[1]!.samples, 3200, 'the 200 ms said after the last final were replayed');
});

test('STT: after the last failed reconnect a clear fatal error frame goes upstream (a deaf bot does not carry on)', async (t) => {
  const clock = new VirtualClock();
  const service = new ScriptedSTT(clock, []);
  const stt = new STTProcessor(service, { reconnectBaseMs: 100, reconnectAttempts: 3 });
  const run = runProcessorTest(stt, [{ sleepMs: 10 }], { clock, sendEnd: false });
  const { upstream } = await run;
  service.failConnects = 10;
  service.drop();
  await clock.advance(2000);
  const errors = upstream.filter((f) => f.type === 'error');
  t.is(errors.length, 1);
  t.like(errors[0], { code: 'stt_unavailable', fatal: true });
  t.regex((errors[0] as Frame & { message: string }).message, /3 reconnect attempts failed \(socket hang up; last attempt: connection refused\)/);
  t.true(stt.unavailable);
});

test('STT: audio sent while a final was being recognised is replayed after a drop (a final covers only up to its end)', async (t) => {
  const clock = new VirtualClock();
  const service = new ScriptedSTT(clock, ['first', 'second'], 150);
  const stt = new STTProcessor(service, { reconnectBaseMs: 100 });
  // 100 ms, end of turn, then the user goes on speaking for 300 ms while the final is pending.
  await runProcessorTest(stt, [...audioSteps(speech(100)), frame('vad-speech-stopped', { silenceMs: 200 }), ...audioSteps(speech(300))], { clock, sendEnd: false });
  service.drop();
  await clock.advance(150);
  t.is(stt.reconnects, 1);
  t.is(service.connections[1]!.samples, 4800, 'the 300 ms after the final end were replayed, none of the 100 ms before');
});

test('STT: speech that fell out of the replay buffer during an outage is reported, not silently lost', async (t) => {
  const clock = new VirtualClock();
  const service = new ScriptedSTT(clock, []);
  const stt = new STTProcessor(service, { reconnectBaseMs: 600, replayBufferMs: 200 });
  const { upstream } = await runProcessorTest(stt, [...audioSteps(speech(100))], { clock, sendEnd: false });
  service.drop();
  // 500 ms more speech while the provider is away; the buffer keeps the last 200 ms.
  for (const c of [...chunkAudio(speech(500), 16_000, 20)]) {
    stt.queueFrame(frame('input-audio', { pcm: c, sampleRate: 16_000, channels: 1 }), 'downstream');
    await clock.advance(20);
  }
  await clock.advance(200);
  t.is(stt.reconnects, 1);
  t.is(service.connections[1]!.samples, 3200, 'the last 200 ms were replayed');
  const errors = upstream.filter((f) => f.type === 'error');
  t.is(errors.length, 1);
  t.like(errors[0], { code: 'stt_audio_lost', fatal: false });
  t.regex((errors[0] as Frame & { message: string }).message, /400 ms of speech .* could not be replayed/);
});

test('STT: input audio that is not mono gets one clear error frame and is not sent to the provider', async (t) => {
  const clock = new VirtualClock();
  const service = new ScriptedSTT(clock, []);
  const stt = new STTProcessor(service);
  const stereo = frame('input-audio', { pcm: new Int16Array(640), sampleRate: 16_000, channels: 2 });
  const { upstream } = await runProcessorTest(stt, [stereo, { sleepMs: 20 }, stereo, { sleepMs: 20 }], { clock });
  const errors = upstream.filter((f) => f.type === 'error');
  t.is(errors.length, 1, 'reported once, not per frame');
  t.like(errors[0], { code: 'unsupported_audio', fatal: false });
  t.regex((errors[0] as Frame & { message: string }).message, /mono PCM .*got 2 channel/);
  t.is(service.connections[0]!.samples, 0);
});
