import type { Context } from 'koa';
import { ApiError } from './api-error.ts';

/**
 * Reads and parses a JSON request body with a hard size cap. Written here rather than taken
 * from a body-parser so every failure (too large, not JSON, wrong media type) maps to one
 * precise error code instead of a generic 400/500.
 */
export async function readJsonBody(ctx: Context, maxBytes: number): Promise<unknown> {
  const headers = ctx.req.headers;
  // No Content-Length and no Transfer-Encoding: HTTP/1.1 says there is no body (every GET).
  if (headers['content-length'] === undefined && headers['transfer-encoding'] === undefined) return undefined;
  const declared = Number(headers['content-length'] || 0);
  if (declared > maxBytes) {
    ctx.req.resume();
    throw new ApiError('payload_too_large', `request body exceeds ${maxBytes} bytes`, { max_bytes: maxBytes });
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > maxBytes) {
      ctx.req.resume();
      throw new ApiError('payload_too_large', `request body exceeds ${maxBytes} bytes`, { max_bytes: maxBytes });
    }
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return undefined;
  const type = ctx.get('content-type');
  if (type && !/^application\/([\w.+-]*\+)?json\b/i.test(type) && !/^text\/plain\b/i.test(type)) {
    throw new ApiError('unsupported_media_type', `expected Content-Type application/json, got ${type}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new ApiError('invalid_json', `request body is not valid JSON: ${(err as Error).message}`);
  }
  const problem = inspectJson(value);
  if (problem) {
    throw new ApiError('validation_failed', `invalid body: ${problem.path || '/'} ${problem.message}`, { issues: [{ location: 'body', path: problem.path || '/', message: problem.message }] });
  }
  return value;
}

export const JSON_BODY_RULES = {
  /** Deeper documents are refused: no field needs it, and deep nesting exhausts stacks downstream. */
  maxDepth: 64,
} as const;

/**
 * Walks a parsed document without recursion: PostgreSQL text and jsonb cannot hold U+0000, and
 * nesting beyond `maxDepth` is refused. Returns the first problem, or null.
 */
export function inspectJson(root: unknown, maxDepth: number = JSON_BODY_RULES.maxDepth): { path: string; message: string } | null {
  const stack: Array<{ value: unknown; path: string; depth: number }> = [{ value: root, path: '', depth: 0 }];
  while (stack.length) {
    const { value, path, depth } = stack.pop()!;
    if (typeof value === 'string') {
      if (value.includes('\0')) return { path, message: 'contains a NUL character' };
      continue;
    }
    if (!value || typeof value !== 'object') continue;
    if (depth >= maxDepth) return { path, message: `is nested deeper than ${maxDepth} levels` };
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v] as const) : Object.entries(value);
    for (const [key, child] of entries) {
      if (key.includes('\0')) return { path: `${path}/${key.replaceAll('\0', '')}`, message: 'has a key with a NUL character' };
      stack.push({ value: child, path: `${path}/${key}`, depth: depth + 1 });
    }
  }
  return null;
}

/** Path of the first string or key holding U+0000 (query strings, path parameters), or null. */
export function nulPath(value: unknown, path: string): string | null {
  const problem = inspectJson(value, Number.MAX_SAFE_INTEGER);
  return problem ? `${path}${problem.path}` : null;
}
