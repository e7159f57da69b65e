/** The bot's reading of client messages: typed when valid, ignored with a reason otherwise, never a throw. */
import test from 'ava';
import { latencySummary, parseClientMessage } from '../../agent/session-messages.ts';
import { SESSION_MESSAGE_LIMITS } from '../../protocol/session-messages.ts';

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
