import test from 'ava';
import { Writable } from 'node:stream';
import { pino, type LoggerOptions } from 'pino';
import { requestLineWriter } from '../../server/http/request-log.ts';

/** What a logger writes, line by line. */
function capture(options: LoggerOptions = {}) {
  const lines: string[] = [];
  const sink = new Writable({ write(chunk, _e, done) { lines.push(String(chunk)); done(); } });
  return { logger: pino({ level: 'info', ...options }, sink), lines };
}

const CASES: Array<[string, number, number]> = [
  ['/v1/agents/0b6c2a52-54a8-4b9c-9a63-2f1e6f6c2f10', 200, 1.3],
  ['/v1/a"b\\c/\u00e9', 404, 0],
  ['/v1/' + 'x'.repeat(80), 500, 12345.6],
];

// The request log writes its line without pino's general path when nothing would change it: the
// line must be the one `logger.info({ method, path, status, ms }, 'request')` writes, byte for byte
// (the time aside, read twice).
for (const [what, options] of [
  ['default', {}],
  ['production (redaction of a request header)', { redact: ['req.headers["x-api-key"]'] }],
  ['custom base', { base: { component: 'api' } }],
  ['CRLF', { crlf: true }],
  ['custom level formatter', { formatters: { level: (label: string) => ({ level: label }) } }],
  ['time as ISO', { timestamp: pino.stdTimeFunctions.isoTime }],
  ['a mixin (general path)', { mixin: () => ({ extra: 1 }) }],
  ['a serializer of path (general path)', { serializers: { path: (p: string) => p.toUpperCase() } }],
  ['redaction of path (general path)', { redact: ['path'] }],
  ['another message key (general path)', { messageKey: 'message' }],
] as Array<[string, LoggerOptions]>) {
  test(`request log line: as pino writes it, ${what}`, (t) => {
    const fast = capture(options);
    const viaPino = capture(options);
    const child = capture(options);
    const childViaPino = capture(options);
    const write = requestLineWriter(fast.logger);
    const childLogger = child.logger.child({ surface: 'rest' });
    const writeChild = requestLineWriter(childLogger);
    const childLoggerViaPino = childViaPino.logger.child({ surface: 'rest' });
    for (const [path, status, ms] of CASES) {
      write('GET', path, status, ms);
      viaPino.logger.info({ method: 'GET', path, status, ms }, 'request');
      writeChild('POST', path, status, ms);
      childLoggerViaPino.info({ method: 'POST', path, status, ms }, 'request');
    }
    const withoutTime = (l: string) => l.replace(/"time":("[^"]*"|\d+)/, '"time":T');
    t.deepEqual(fast.lines.map(withoutTime), viaPino.lines.map(withoutTime));
    t.deepEqual(child.lines.map(withoutTime), childViaPino.lines.map(withoutTime));
    t.is(fast.lines.length, CASES.length);
    t.like(JSON.parse(child.lines[0]!), { surface: 'rest', method: 'POST', status: 200 });
  });
}

test('request log line: nothing below info, the level read per line', (t) => {
  const { logger, lines } = capture();
  const write = requestLineWriter(logger);
  logger.level = 'warn';
  write('GET', '/v1/agents', 200, 1);
  t.is(lines.length, 0);
  logger.level = 'info';
  write('GET', '/v1/agents', 200, 1);
  t.is(lines.length, 1);
});
