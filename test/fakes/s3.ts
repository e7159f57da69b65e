/**
 * A local stand-in for the S3 REST API (path-style addressing), enough for the REST server's S3
 * driver: CreateMultipartUpload, UploadPart (pre-signed PUT), ListParts (paged), CompleteMultipartUpload,
 * AbortMultipartUpload, PutObject, HeadObject, GetObject (pre-signed), DeleteObject. It speaks
 * S3's XML bodies, quoted MD5 ETags, multipart ETags `"<md5 of md5s>-N"` and S3 error documents
 * (`NoSuchKey`, `NoSuchUpload`, `InvalidPart`, `EntityTooSmall`). It checks that requests are
 * signed (Authorization header or X-Amz-Signature query) but does not verify the signatures.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

interface Upload { key: string; parts: Map<number, Buffer> }

export interface FakeS3 {
  endpoint: string;
  bucket: string;
  objects: Map<string, { data: Buffer; etag: string; contentType: string }>;
  uploads: Map<string, Upload>;
  /** Every request: method, key, query keys, whether it was signed. */
  requests: Array<{ method: string; key: string; query: string[]; signed: boolean }>;
  /** ListParts answers at most this many parts a page (AWS: 1,000, whatever `max-parts` asks). */
  listPartsPageSize: number;
  /**
   * An outage: `reset` drops every connection as it arrives (S3 unreachable), `503` answers S3's
   * `ServiceUnavailable`, `stall` accepts requests and never answers, `stall-body` answers a GET's
   * headers and the first half of its body, then nothing more. Requests are still recorded.
   */
  outage: false | 'reset' | '503' | 'stall' | 'stall-body';
  /** A missing key's GET and HEAD answer 403 AccessDenied, as S3 does for credentials without s3:ListBucket. */
  missingAs403: boolean;
  /** The next this many CompleteMultipartUpload requests are carried out, then their connection dropped before the answer. */
  dropCompleteAnswers: number;
  close(): Promise<void>;
}

const MIN_PART = 5 * 1024 * 1024;
const md5 = (b: Buffer) => createHash('md5').update(b).digest();
const xmlEscape = (s: string) => s.replace(/[<>&'"]/g, (c) => `&#${c.charCodeAt(0)};`);

function error(res: ServerResponse, status: number, code: string, message: string, head = false): void {
  res.writeHead(status, { 'content-type': 'application/xml', 'x-amz-request-id': randomBytes(8).toString('hex') });
  res.end(head ? undefined : `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code><Message>${xmlEscape(message)}</Message><RequestId>fake</RequestId></Error>`);
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

export async function startFakeS3(bucket = 'svc-test'): Promise<FakeS3> {
  const objects: FakeS3['objects'] = new Map();
  const uploads = new Map<string, Upload>();
  const requests: FakeS3['requests'] = [];
  const fake: FakeS3 = {
    endpoint: '', bucket, objects, uploads, requests, listPartsPageSize: 1000, outage: false, missingAs403: false, dropCompleteAnswers: 0,
    close: () => new Promise<void>((r) => { server.close(() => r()); server.closeAllConnections(); }),
  };
  const server = createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', 'http://fake');
    const [, b, ...rest] = url.pathname.split('/');
    const key = decodeURIComponent(rest.join('/'));
    const q = url.searchParams;
    const signed = !!req.headers.authorization || q.has('X-Amz-Signature');
    requests.push({ method: req.method!, key, query: [...q.keys()], signed });
    if (fake.outage === 'reset') return void req.socket.destroy();
    if (fake.outage === 'stall') return;
    if (fake.outage === '503') return error(res, 503, 'ServiceUnavailable', 'Please reduce your request rate.', req.method === 'HEAD');
    if (!signed) return error(res, 403, 'AccessDenied', 'Access Denied');
    if (b !== bucket) return error(res, 404, 'NoSuchBucket', 'The specified bucket does not exist');
    const body = await readBody(req);
    const uploadId = q.get('uploadId');
    const send = (status: number, xml?: string, headers: Record<string, string> = {}) => {
      res.writeHead(status, { ...(xml ? { 'content-type': 'application/xml' } : {}), ...headers });
      res.end(xml ? `<?xml version="1.0" encoding="UTF-8"?>\n${xml}` : undefined);
    };
    if (req.method === 'POST' && q.has('uploads')) {
      const id = randomBytes(24).toString('base64url');
      uploads.set(id, { key, parts: new Map() });
      return send(200, `<InitiateMultipartUploadResult><Bucket>${bucket}</Bucket><Key>${xmlEscape(key)}</Key><UploadId>${id}</UploadId></InitiateMultipartUploadResult>`);
    }
    if (uploadId !== null) {
      const upload = uploads.get(uploadId);
      if (!upload || upload.key !== key) return error(res, 404, 'NoSuchUpload', 'The specified upload does not exist.');
      if (req.method === 'PUT' && q.has('partNumber')) {
        const n = Number(q.get('partNumber'));
        upload.parts.set(n, body);
        return send(200, undefined, { ETag: `"${md5(body).toString('hex')}"` });
      }
      if (req.method === 'GET') {
        // Pages as S3's: parts after `part-number-marker`, at most `max-parts` (capped by the page size).
        const marker = Number(q.get('part-number-marker') ?? 0);
        const max = Math.min(Number(q.get('max-parts') ?? 1000), fake.listPartsPageSize);
        const after = [...upload.parts.entries()].sort((x, y) => x[0] - y[0]).filter(([n]) => n > marker);
        const page = after.slice(0, max);
        const truncated = after.length > page.length;
        const parts = page
          .map(([n, d]) => `<Part><PartNumber>${n}</PartNumber><LastModified>${new Date().toISOString()}</LastModified><ETag>"${md5(d).toString('hex')}"</ETag><Size>${d.length}</Size></Part>`).join('');
        const next = truncated ? `<NextPartNumberMarker>${page.at(-1)![0]}</NextPartNumberMarker>` : '';
        return send(200, `<ListPartsResult><Bucket>${bucket}</Bucket><Key>${xmlEscape(key)}</Key><UploadId>${uploadId}</UploadId><PartNumberMarker>${marker}</PartNumberMarker>${next}<MaxParts>${max}</MaxParts><IsTruncated>${truncated}</IsTruncated>${parts}</ListPartsResult>`);
      }
      if (req.method === 'DELETE') {
        uploads.delete(uploadId);
        return send(204);
      }
      if (req.method === 'POST') {
        const listed = [...body.toString().matchAll(/<Part>\s*(?:<ETag>([^<]*)<\/ETag>\s*<PartNumber>(\d+)<\/PartNumber>|<PartNumber>(\d+)<\/PartNumber>\s*<ETag>([^<]*)<\/ETag>)/g)]
          .map((m) => ({ n: Number(m[2] ?? m[3]), etag: (m[1] ?? m[4])!.replace(/&quot;|&#34;|"/g, '') }));
        const datas: Buffer[] = [];
        for (const [i, p] of listed.entries()) {
          const d = upload.parts.get(p.n);
          if (!d || md5(d).toString('hex') !== p.etag) return error(res, 400, 'InvalidPart', 'One or more of the specified parts could not be found.');
          if (i < listed.length - 1 && d.length < MIN_PART) return error(res, 400, 'EntityTooSmall', 'Your proposed upload is smaller than the minimum allowed object size.');
          datas.push(d);
        }
        const etag = `"${md5(Buffer.concat(datas.map(md5))).toString('hex')}-${datas.length}"`;
        objects.set(key, { data: Buffer.concat(datas), etag, contentType: 'binary/octet-stream' });
        uploads.delete(uploadId);
        if (fake.dropCompleteAnswers > 0) {
          fake.dropCompleteAnswers--;
          return void req.socket.destroy();
        }
        return send(200, `<CompleteMultipartUploadResult><Location>http://fake/${bucket}/${xmlEscape(key)}</Location><Bucket>${bucket}</Bucket><Key>${xmlEscape(key)}</Key><ETag>${xmlEscape(etag)}</ETag></CompleteMultipartUploadResult>`);
      }
    }
    const object = objects.get(key);
    if (req.method === 'PUT') {
      const etag = `"${md5(body).toString('hex')}"`;
      objects.set(key, { data: body, etag, contentType: String(req.headers['content-type'] ?? 'binary/octet-stream') });
      return send(200, undefined, { ETag: etag });
    }
    if (req.method === 'DELETE') {
      objects.delete(key);
      return send(204);
    }
    if (req.method === 'HEAD' || req.method === 'GET') {
      if (!object) return fake.missingAs403 ? error(res, 403, 'AccessDenied', 'Access Denied', req.method === 'HEAD') : error(res, 404, 'NoSuchKey', 'The specified key does not exist.', req.method === 'HEAD');
      res.writeHead(200, {
        'content-type': q.get('response-content-type') ?? object.contentType,
        'content-length': String(object.data.length),
        ETag: object.etag,
        'last-modified': new Date().toUTCString(),
      });
      if (req.method === 'GET' && fake.outage === 'stall-body') return void res.write(object.data.subarray(0, object.data.length >> 1));
      return res.end(req.method === 'GET' ? object.data : undefined);
    }
    error(res, 405, 'MethodNotAllowed', 'The specified method is not allowed against this resource.');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  Object.assign(fake, { endpoint: `http://127.0.0.1:${port}` });
  return fake;
}
