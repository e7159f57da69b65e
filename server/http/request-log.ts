import { channel } from 'node:diagnostics_channel';
import type { Middleware } from 'koa';
import { pino, type Logger } from 'pino';

/**
 * One log line per request: method, path (no query string: signed URLs carry signatures
 * there), status and duration. Headers and bodies are never logged (keys, provider secrets).
 * `quiet` paths are not logged (health probes: one every few seconds, forever).
 */
export function requestLog(logger: Logger, quiet: ReadonlySet<string> = new Set()): Middleware {
  const write = requestLineWriter(logger);
  return async (ctx, next) => {
    const path = ctx.path;
    if (quiet.has(path)) return next();
    const started = performance.now();
    try {
      await next();
    } finally {
      // 499 (nginx's "client closed request"): the client hung up mid-request; never answered.
      write(ctx.method, path, ctx.state.clientAborted ? 499 : ctx.status, Math.round((performance.now() - started) * 10) / 10);
    }
  };
}

type LineWriter = (method: string, path: string, status: number, ms: number) => void;

const S = pino.symbols as Record<string, symbol> & typeof pino.symbols;
/** Keys of the line, each of which pino would pass through a serializer or redaction if one were set for it. */
const KEYS = ['method', 'path', 'status', 'ms', 'msg'] as const;
/** Subscribed to by tools tracing pino's serialisation (diagnostics_channel `tracing:pino_asJson`). */
const asJsonTrace = channel('tracing:pino_asJson:start');

/**
 * Writes the line `logger.info({ method, path, status, ms }, 'request')` writes, at `info`, built
 * in one string concatenation: the same level field, time, bindings (read per line: `setBindings`
 * may change them), keys in the same order and end of line, to the logger's own stream. pino's
 * general path (an object per request, its keys walked and tested against serializers and
 * redaction, the message formatted, about 6 % of a REST GET's CPU with the middleware) is used when
 * the logger has anything that would change the line: a mixin, a log formatter or hook, a
 * serializer or redaction of one of these keys, another message key, a message prefix, a nested
 * key, a stream that needs the line's metadata (multistream), or a tracer of pino's serialisation.
 */
export function requestLineWriter(logger: Logger): LineWriter {
  const general: LineWriter = (method, path, status, ms) => {
    if (logger.isLevelEnabled('info')) logger.info({ method, path, status, ms }, 'request');
  };
  const l = logger as unknown as Record<symbol, any>;
  const formatters = l[S.formattersSym] ?? {};
  const hooks = l[S.hooksSym] ?? {};
  const serializers = l[S.serializersSym] ?? {};
  const stringifiers = l[S.stringifiersSym] ?? {};
  const stream = l[S.streamSym];
  const plain =
    !l[S.mixinSym] && !formatters.log && !hooks.logMethod && !hooks.streamWrite && l[S.messageKeySym] === 'msg' &&
    l[S.msgPrefixSym] === undefined && !l[S.nestedKeySym] && stringifiers[S.wildcardFirstSym] === undefined &&
    KEYS.every((k) => serializers[k] === undefined && stringifiers[k] === undefined) &&
    typeof logger.levels?.values?.info === 'number' && stream && typeof stream.write === 'function' && stream[S.needsMetadataGsym] !== true &&
    typeof l[S.timeSym] === 'function' && typeof l[S.endSym] === 'string';
  if (!plain) return general;
  const info = logger.levels.values.info!;
  return (method, path, status, ms) => {
    if (!logger.isLevelEnabled('info')) return;
    if (asJsonTrace.hasSubscribers) return general(method, path, status, ms);
    l[S.streamSym].write(
      l[S.lsCacheSym][info] + l[S.timeSym]() + l[S.chindingsSym] +
      ',"method":' + JSON.stringify(method) + ',"path":' + JSON.stringify(path) + ',"status":' + status + ',"ms":' + ms +
      ',"msg":"request"' + l[S.endSym],
    );
  };
}
