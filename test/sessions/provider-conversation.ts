/**
 * A visitor's whole conversation with an agent, for the provider end-to-end tests: the greeting is
 * heard (the offline phrase recogniser finds it in the audio received), the mouth moves with it, a
 * question is recognised by the deployment's speech-to-text and answered, the call is recorded.
 */
import { concat } from '../../core/audio.ts';
import type { LocalTTSService } from '../../plugins/local/index.ts';
import { RoomVisitor } from '../agent/room-visitor.ts';
import { holdsWithin, until } from '../../testing/until.ts';
import { longestQuietStretchMs, recognise, regionMotion, speech, tailHeard } from './conversation-audio.ts';
import { roomOf, type SessionTestServer } from './session-harness.ts';

export const GREETING = 'Welcome to the space station tour.';
export const QUESTION = 'What is your name?';

/** A whole conversation with an agent of `ttsProvider` on server `s`; checks what a visitor sees and hears. */
export async function converse(t: any, s: SessionTestServer, voice: LocalTTSService, ttsProvider: string, voiceId: string | null): Promise<void> {
  const agentId = await s.agent({ tts_provider: ttsProvider, voice_id: voiceId, behaviour: { greeting: GREETING, greeting_mode: 'verbatim' }, starts_conversation: true });
  const res = await s.connect({ agent_id: agentId, client_user_ref: `visitor-${ttsProvider}` });
  t.is(res.status, 200, res.text);
  const visitor = await RoomVisitor.join(res.body.room_url, res.body.token);
  const received: { at: number; pcm: Int16Array; rate: number }[] = [];
  const motion: { at: number; mouth: number }[] = [];
  let last: Uint8Array | null = null;
  visitor.onAudio = (samples, rate, channels, at) => received.push({ at, pcm: Int16Array.from(channels === 1 ? samples : samples.filter((_, i) => i % channels === 0)), rate });
  visitor.onVideoFrame = (frame, at) => {
    const luma = frame.data.subarray(0, frame.width * frame.height);
    if (last) motion.push({ at, mouth: regionMotion(last, luma, frame.width, frame.height, [0.4, 0.38, 0.5, 0.47]) });
    last = Uint8Array.from(luma);
  };
  try {
    await until(() => visitor.connectionState === 'connected' && visitor.videoFrames > 10, { timeoutMs: 20_000, intervalMs: 20, what: 'the idle face to arrive' });
    const readyAt = Date.now();
    visitor.sendMessage({ type: 'client-ready', version: '1.0.0' });
    const botTurns = () => visitor.ofType('transcript-turn').filter((m) => m.owner === 'bot');
    if (!(await holdsWithin(() => botTurns().length >= 1, { timeoutMs: 30_000, intervalMs: 20 }))) {
      t.log(JSON.stringify(visitor.messages.map((m) => m.message)).slice(0, 3000));
      t.fail('the greeting turn ends');
      return;
    }
    t.is(botTurns()[0]!.text, GREETING);
    await tailHeard(visitor);
    const greeting = received.filter((a) => a.at >= readyAt);
    t.deepEqual(await recognise(concat(greeting.map((a) => a.pcm)), greeting[0]!.rate, [GREETING, QUESTION, 'Tell me a joke', 'Goodbye']), [GREETING], `the greeting, spoken by ${ttsProvider}, is heard (longest quiet stretch inside it: ${longestQuietStretchMs(visitor, readyAt)} ms)`);
    const idle = motion.filter((m) => m.at < readyAt);
    const speaking = motion.filter((m) => visitor.audioLevels.some((l) => Math.abs(l.at - m.at) < 40 && l.rms > 0.02));
    const mean = (xs: { mouth: number }[]) => xs.reduce((a, b) => a + b.mouth, 0) / Math.max(1, xs.length);
    t.true(idle.length > 5 && speaking.length > 5, `frames: ${idle.length} idle, ${speaking.length} speaking`);
    t.true(mean(speaking) > mean(idle) * 1.5, `the mouth moves with ${ttsProvider}'s speech: ${mean(speaking).toFixed(2)} vs idle ${mean(idle).toFixed(2)}`);

    const asked = Date.now();
    visitor.say(await speech(voice, QUESTION));
    await until(() => botTurns().length >= 2, { timeoutMs: 30_000, intervalMs: 20, what: 'the answer turn to end' });
    t.like(visitor.ofType('transcript-turn').find((m) => m.owner === 'user'), { text: QUESTION, final: true });
    t.true(String(botTurns()[1]!.text).length > 0);
    t.true(visitor.audibleMs(asked + 500) > 300, 'the answer is heard');

    t.deepEqual((await s.release(roomOf(res.body.room_url))).body, { released: 1 });
    const call = await s.endedCallOf(agentId, res.body.session_id);
    t.like(call, { status: 'completed', termination_reason: 'client_released', failure_reason: null });
  } finally {
    visitor.close();
  }
}

