import type Router from '@koa/router';
import type { Context } from 'koa';
import type { ApiRoutes } from '../../http/api-routes.ts';
import { ApiError } from '../../http/api-error.ts';
import { payloadTooLarge } from '../../http/json-body.ts';
import { MIME_TYPE_RE } from '../schema/assets.ts';
import { errors } from '../schema/common.ts';
import { decodeObjectKey, type FilesystemStorage } from '../../storage/filesystem-storage.ts';
import { MULTIPART_RULES, StorageError } from '../../storage/object-storage.ts';

const signedQuery = {
  type: 'object',
  properties: { expires: { type: 'string' }, signature: { type: 'string' }, content_type: { type: 'string' } },
};

/**
 * The filesystem driver's signed URLs: part uploads (PUT) and object downloads (GET). Only
 * mounted when that driver is active; with S3 the URLs point at the bucket instead.
 */
export function mountStorageRoutes(api: ApiRoutes, router: Router, storage: FilesystemStorage): void {
  const tag = 'Storage (filesystem driver)';
  const check = (ctx: Context, method: string, query: Record<string, string>) => {
    const verdict = storage.checkSignature(method, ctx.path, query, Date.now());
    if (verdict === 'invalid_signature') throw new ApiError('invalid_signature', 'URL signature is missing or invalid');
    if (verdict === 'url_expired') throw new ApiError('url_expired', 'signed URL has expired');
  };

  api.add(router, {
    method: 'put', path: '/storage/uploads/:upload_id/parts/:part_number', operationId: 'putUploadPart', tag, auth: 'signed_url',
    summary: 'Upload one part to a pre-signed URL from sign-part; the response ETag header goes into finalize',
    params: {
      type: 'object',
      required: ['upload_id', 'part_number'],
      properties: { upload_id: { type: 'string', pattern: '^[A-Za-z0-9_-]{16,64}$' }, part_number: { type: 'integer', minimum: 1, maximum: MULTIPART_RULES.maxPartNumber } },
    },
    query: signedQuery,
    rawBody: true,
    responses: { 200: { description: 'Part stored; ETag header set' }, ...errors(400, 403, 404) },
  }, async ({ ctx, params, query }) => {
    check(ctx, 'PUT', query);
    // Refused before a byte is read when the client says it will send more than a part may hold.
    const declared = Number(ctx.get('content-length') || NaN);
    if (declared > MULTIPART_RULES.maxPartBytes) throw payloadTooLarge(ctx, MULTIPART_RULES.maxPartBytes, `a part may hold at most ${MULTIPART_RULES.maxPartBytes} bytes`);
    try {
      const etag = await storage.writePart(params.upload_id, params.part_number, ctx.req);
      return { status: 200, headers: { ETag: etag } };
    } catch (err) {
      if (err instanceof StorageError && err.code === 'part_too_large') throw payloadTooLarge(ctx, MULTIPART_RULES.maxPartBytes, err.message);
      if (err instanceof StorageError) throw new ApiError('upload_not_found', err.message);
      // The client hung up mid-part: the error middleware tells it from a server fault
      // (`isClientAbort`: logged as 499, no 500).
      throw err;
    }
  });

  api.add(router, {
    method: 'get', path: '/storage/objects/:object', operationId: 'getStoredObject', tag, auth: 'signed_url',
    summary: 'Download an object through a pre-signed asset_url',
    params: { type: 'object', required: ['object'], properties: { object: { type: 'string', pattern: '^[A-Za-z0-9_-]{1,1024}$' } } },
    query: signedQuery,
    responses: { 200: { description: 'The object bytes', contentType: 'application/octet-stream' }, ...errors(400, 403, 404) },
  }, async ({ ctx, params, query }) => {
    check(ctx, 'GET', query);
    const key = decodeObjectKey(params.object);
    const head = await storage.headObject(key);
    if (!head) throw new ApiError('not_found', 'object not found');
    const remainingS = Math.max(0, Math.floor((Number(query.expires) - Date.now()) / 1000));
    const served = servedType(query.content_type);
    const headers = { ETag: head.etag, 'Cache-Control': `private, max-age=${remainingS}`, 'Accept-Ranges': 'bytes', ...OBJECT_SECURITY_HEADERS, ...(served.inline ? {} : { 'Content-Disposition': 'attachment' }) };
    // Set before the body, so an error answer (416) carries them too.
    for (const [name, value] of Object.entries(OBJECT_SECURITY_HEADERS)) ctx.set(name, value);
    ctx.type = served.type;
    // Single byte ranges, so browsers can seek in videos; anything else gets the whole object.
    const range = parseRange(ctx.get('range'), head.sizeBytes);
    if (range === 'unsatisfiable') {
      ctx.set('Content-Range', `bytes */${head.sizeBytes}`);
      throw new ApiError('range_not_satisfiable', `range outside the ${head.sizeBytes}-byte object`);
    }
    if (range) {
      ctx.length = range.end - range.start + 1;
      ctx.body = await storage.openObject(key, range);
      return { status: 206, headers: { ...headers, 'Content-Range': `bytes ${range.start}-${range.end}/${head.sizeBytes}` } };
    }
    ctx.length = head.sizeBytes;
    ctx.body = await storage.openObject(key);
    return { status: 200, headers };
  });
}

/**
 * Stored objects are user content served from the API's own origin: they must never run there.
 * `nosniff` stops browsers from guessing an active type, the CSP sandboxes anything a browser
 * would still render (no script, no plugin, no same-origin access), and every type not on
 * `INLINE_TYPES` is sent as a download (`Content-Disposition: attachment`).
 */
export const OBJECT_SECURITY_HEADERS = {
  'X-Content-Type-Options': 'nosniff',
  'Content-Security-Policy': "default-src 'none'; sandbox",
} as const;

/**
 * Types shown inline (a preview `<img>`/`<video>` needs it): raster images, audio, video and
 * opaque bytes. Not SVG (an SVG document runs script), not HTML, XML, PDF or text.
 */
const INLINE_TYPES = [/^image\/(png|jpeg|gif|webp|avif|bmp|x-icon|vnd\.microsoft\.icon|heic|heif|tiff)$/, /^audio\/[\w.+-]+$/, /^video\/[\w.+-]+$/, /^application\/octet-stream$/];

/** The Content-Type to serve for a signed `content_type` (an invalid one, stored before validation existed, becomes bytes). */
export function servedType(contentType: string | undefined): { type: string; inline: boolean } {
  const type = contentType && MIME_TYPE_RE.test(contentType) ? contentType : 'application/octet-stream';
  const essence = type.split(';')[0]!.trim().toLowerCase();
  return { type, inline: INLINE_TYPES.some((re) => re.test(essence)) };
}

/** `bytes=a-b`, `bytes=a-` or `bytes=-n`; multiple ranges are answered with the whole object. */
export function parseRange(header: string, size: number): { start: number; end: number } | 'unsatisfiable' | null {
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (!m || (m[1] === '' && m[2] === '')) return null;
  let start: number;
  let end: number;
  if (m[1] === '') {
    const suffix = Number(m[2]);
    if (suffix === 0) return 'unsatisfiable';
    start = Math.max(0, size - suffix);
    end = size - 1;
  } else {
    start = Number(m[1]);
    end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  }
  if (start >= size || start > end) return 'unsatisfiable';
  return { start, end };
}
