/** The bot's reading of client messages: typed when valid, ignored with a reason otherwise, never a throw; the bot's turns as the output plays them. */
import test from 'ava';
import { frame, signal, type Frame } from '../../core/frames.ts';
import { latencySummary, parseClientMessage, SessionMessageEmitter } from '../../agent/session-messages.ts';
import { SESSION_MESSAGE_LIMITS, type BotMessage } from '../../protocol/session-messages.ts';

test('the three client messages are read with their fields', (t) => {
  t.deepEqual(parseClientMessage({ type: 'client-ready', version: '1.0.0', about: { library: 'svc-widget' } }), { type: 'client-ready', version: '1.0.0', about: { library: 'svc-widget' } });
  t.deepEqual(parseClientMessage({ type: 'client-ready' }), { type: 'client-ready', version: '' }, 'an older client without a version is still ready');
  t.deepEqual(parseClientMessage({ type: 'client-ready', version: '1', about: ['x'] }), { type: 'client-ready', version: '1' }, 'a malformed about is dropped');
  t.deepEqual(parseClientMessage({ type: 'append-system-context', text: 'The user is on the pricing page.' }), { type: 'append-system-context', text: 'The user is on the pricing page.' });
  const longest = 'a'.repeat(SESSION_MESSAGE_LIMITS.maxContextTextLength);
  t.deepEqual(parseClientMessage({ type: 'append-system-context', text: longest }), { type: 'append-system-context', text: longest });
  t.deepEqual(parseClientMessage({ type: 'hang-up', extra: 1 }), { type: 'hang-up' });
});

test('anything else is ignored with a reason, whatever it is', (t) => {
  const cases: [unknown, RegExp][] = [
    [null, /not a JSON object/],
    ['hang-up', /not a JSON object/],
    [['hang-up'], /not a JSON object/],
    [{}, /string `type`/],
    [{ type: 7 }, /string `type`/],
    [{ type: 'send-text', content: 'hi' }, /unknown message type `send-text`/],
    [{ type: 'x'.repeat(1000) }, /unknown message type `x{40}`$/],
    [{ type: 'append-system-context' }, /non-empty `text`/],
    [{ type: 'append-system-context', text: '   ' }, /non-empty `text`/],
    [{ type: 'append-system-context', text: { a: 1 } }, /non-empty `text`/],
    [{ type: 'append-system-context', text: 'a'.repeat(SESSION_MESSAGE_LIMITS.maxContextTextLength + 1) }, /longer than 4000/],
  ];
  for (const [value, reason] of cases) {
    const parsed = parseClientMessage(value);
    t.true('ignored' in parsed, JSON.stringify(value)?.slice(0, 60));
    if ('ignored' in parsed) t.regex(parsed.reason, reason);
  }
});

test('latency summary: median and maximum', (t) => {
  t.deepEqual(latencySummary([]), { count: 0, p50: null, max: null });
  t.deepEqual(latencySummary([900]), { count: 1, p50: 900, max: 900 });
  t.deepEqual(latencySummary([700, 300, 1200, 500]), { count: 4, p50: 500, max: 1200 });
  t.deepEqual(latencySummary([700, 300, 1200]), { count: 3, p50: 700, max: 1200 });
});

test('a bot turn whose sound played out before its tts-stopped reached the output ends at the tts-stopped, not merged into the next turn', (t) => {
  const messages: BotMessage[] = [];
  const taps = { vad: 'vad', stt: 'stt', user: 'user', llm: 'llm', tts: 'tts', output: 'output' };
  const emitter = new SessionMessageEmitter({ send: (m) => messages.push(m), taps, userId: () => 'visitor', vadStopMs: 500 });
  let at = 0;
  const atOutput = (f: Frame) => emitter.onFramePushed({ frame: f, source: 'output', destination: 'sink', direction: 'downstream', timestampMs: (at += 10) });
  const states = () => messages.filter((m) => m.type === 'bot-state').map((m) => (m as { state: string }).state);
  const turns = () => messages.filter((m) => m.type === 'transcript-turn').map((m) => (m as { owner: string; text: string }).owner + ': ' + (m as { text: string }).text);
  // The greeting, as a loaded machine ordered it: played out (the output ran dry) before its tts-stopped arrived.
  atOutput(signal('bot-started-speaking'));
  atOutput(frame('tts-text', { text: 'Hello, I am Ada.' }));
  atOutput(signal('bot-stopped-speaking'));
  t.is(states().at(-1), 'thinking', 'ran dry with the turn open: more may come');
  atOutput(frame('tts-stopped', {}));
  t.deepEqual(turns(), ['bot: Hello, I am Ada.']);
  t.is(states().at(-1), 'listening');
  t.deepEqual(messages.filter((m) => m.type === 'bot-tts-stopped'), [{ type: 'bot-tts-stopped', interrupted: false }]);
  // The next answer is a turn of its own, in the usual order (tts-stopped, then the output runs dry).
  atOutput(signal('bot-started-speaking'));
  atOutput(frame('tts-text', { text: 'I am your assistant.' }));
  atOutput(frame('tts-stopped', {}));
  t.is(states().at(-1), 'speaking', 'still playing: the turn ends when the sound does');
  atOutput(signal('bot-stopped-speaking'));
  t.deepEqual(turns(), ['bot: Hello, I am Ada.', 'bot: I am your assistant.']);
  t.is(states().at(-1), 'listening');
  // A pause mid-turn (the TTS slower than real time) stays one turn.
  atOutput(signal('bot-started-speaking'));
  atOutput(frame('tts-text', { text: 'One,' }));
  atOutput(signal('bot-stopped-speaking'));
  atOutput(signal('bot-started-speaking'));
  atOutput(frame('tts-text', { text: 'two.' }));
  atOutput(frame('tts-stopped', {}));
  atOutput(signal('bot-stopped-speaking'));
  t.is(turns().at(-1), 'bot: One, two.');
});
