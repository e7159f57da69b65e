import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readFile, readdir, rename, rm, stat, writeFile, open } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { currentProcess, formatIdentity, isProcessAlive, parseIdentity } from '../db/process-identity.ts';
import type { UrlSigner } from '../security/url-signer.ts';
import { PRIVATE_MODES } from '../security/private-files.ts';
import {
  MULTIPART_RULES,
  StorageError,
  StorageUnavailableError,
  multipartEtag,
  normaliseEtag,
  type CompletedPart,
  type ObjectStorage,
  type StoredObject,
} from './object-storage.ts';

/** Object keys travel in URLs as one base64url segment, so no key can escape the root. */
export const encodeObjectKey = (key: string) => Buffer.from(key, 'utf8').toString('base64url');
export const decodeObjectKey = (token: string) => Buffer.from(token, 'base64url').toString('utf8');

const UPLOAD_ID_RE = /^[A-Za-z0-9_-]{16,64}$/;
const ASSEMBLING_SUFFIX = '.assembling';

export const FILESYSTEM_STORAGE_RULES = {
  /**
   * A half-assembled object older than this whose process is gone is a crash leftover. Generous:
   * instances sharing STORAGE_ROOT from other machines have pids this one cannot check.
   */
  staleTemporaryMs: 60 * 60 * 1000,
} as const;

/** `pid_starttime` of this process (see db/process-identity.ts), for temporary file names. */
const ownerTag = () => formatIdentity(currentProcess()).replace(':', '_');

/**
 * Filesystem driver: objects under `<root>/objects`, parts under `<root>/uploads/<uploadId>`.
 * Everything it writes is its owner's only (folders 0700, files 0600, whatever the umask); the
 * server makes the root itself private at start-up (security/private-files.ts).
 * Upload and download URLs point at this server (`/v1/storage/...`) and carry an HMAC
 * signature with an expiry; `routes/storage.ts` verifies them and calls `writePart`/`openObject`.
 */
/** A path that is not there (or not a file): the object is missing, not the disk failing. */
const isAbsent = (err: unknown) => ['ENOENT', 'ENOTDIR', 'EISDIR'].includes(String((err as NodeJS.ErrnoException)?.code));

/** EIO, EACCES, ENOSPC, EMFILE...: the disk, not the object (503, as S3 being unreachable). */
const diskFailure = (what: string, err: unknown) => new StorageUnavailableError(`${what} failed: ${(err as Error)?.message ?? String(err)}`, { cause: err });

export class FilesystemStorage implements ObjectStorage {
  readonly driver = 'filesystem' as const;

  constructor(
    private readonly root: string,
    private readonly signer: UrlSigner,
  ) {}

  async createMultipartUpload(): Promise<string> {
    const uploadId = randomBytes(18).toString('base64url');
    await mkdir(this.uploadDir(uploadId), { recursive: true, mode: PRIVATE_MODES.directory }).catch((err: unknown) => {
      throw diskFailure('starting an upload', err);
    });
    return uploadId;
  }

  async signUploadPartUrl(_key: string, uploadId: string, partNumber: number, ttlMs: number, baseUrl: string): Promise<string> {
    return this.signedUrl(baseUrl, 'PUT', `/v1/storage/uploads/${uploadId}/parts/${partNumber}`, ttlMs);
  }

  /** Stores one part from the request stream; returns its quoted MD5 ETag like S3. */
  async writePart(uploadId: string, partNumber: number, body: Readable): Promise<string> {
    if (!UPLOAD_ID_RE.test(uploadId)) throw new StorageError('upload_missing', 'unknown upload');
    const dir = this.uploadDir(uploadId);
    try {
      await stat(dir);
    } catch {
      throw new StorageError('upload_missing', `upload ${uploadId} does not exist`);
    }
    const hash = createHash('md5');
    const temp = join(dir, `${partNumber}.${randomBytes(6).toString('hex')}.tmp`);
    let size = 0;
    const counter = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        size += chunk.length;
        if (size > MULTIPART_RULES.maxPartBytes) return done(new StorageError('part_too_large', `a part may hold at most ${MULTIPART_RULES.maxPartBytes} bytes`));
        hash.update(chunk);
        done(null, chunk);
      },
    });
    // The request is piped by hand, not through `pipeline`: over the bound it is only unpiped and
    // paused, never destroyed (destroying it resets the socket, and the 413 would be lost).
    const fromBody = (err: Error) => counter.destroy(err);
    const aborted = () => {
      if ((body as { complete?: boolean }).complete !== true) counter.destroy(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
    };
    body.once('error', fromBody).once('aborted', aborted).once('close', aborted);
    counter.once('error', () => {
      body.unpipe(counter);
      body.pause();
    });
    body.pipe(counter);
    try {
      await pipeline(counter, createWriteStream(temp, { mode: PRIVATE_MODES.file }));
      // Rename last, so a re-sent part replaces the old one atomically.
      await rename(temp, join(dir, String(partNumber)));
    } catch (err) {
      body.off('error', fromBody).off('aborted', aborted).off('close', aborted);
      await rm(temp, { force: true });
      // The upload folder went away under the stream: finalized (parts consumed) or aborted.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new StorageError('upload_missing', `upload ${uploadId} was finalized or aborted while this part was being sent`);
      throw err;
    }
    body.off('error', fromBody).off('aborted', aborted).off('close', aborted);
    return `"${hash.digest('hex')}"`;
  }

  async completeMultipartUpload(key: string, uploadId: string, parts: CompletedPart[], expectedSizeBytes?: number): Promise<StoredObject> {
    const dir = this.uploadDir(uploadId);
    const partDigests: Buffer[] = [];
    const target = this.objectPath(key);
    await mkdir(dirname(target), { recursive: true, mode: PRIVATE_MODES.directory });
    // Named after its process, so a start-up sweep can tell a crash leftover from work in progress.
    const temp = `${target}.${ownerTag()}.${randomBytes(6).toString('hex')}${ASSEMBLING_SUFFIX}`;
    const out = await open(temp, 'w', PRIVATE_MODES.file);
    let sizeBytes = 0;
    try {
      for (const [index, part] of parts.entries()) {
        // Streamed through the digest into the object: a part is never held whole in memory (parts
        // go up to 5 GiB; readFile refuses files over 2 GiB, which read as "never uploaded").
        const path = join(dir, String(part.part_number));
        const partBytes = await stat(path).then((st) => st.size, () => null);
        if (partBytes === null) throw new StorageError('part_missing', `part ${part.part_number} was never uploaded`, { part_number: part.part_number });
        if (index < parts.length - 1 && partBytes < MULTIPART_RULES.minPartBytes) {
          throw new StorageError('part_too_small', `part ${part.part_number} is ${partBytes} bytes; every part but the last must be at least ${MULTIPART_RULES.minPartBytes} bytes`, { part_number: part.part_number, size_bytes: partBytes });
        }
        const hash = createHash('md5');
        let read = 0;
        for await (const chunk of createReadStream(path)) {
          hash.update(chunk as Buffer);
          await out.write(chunk as Buffer);
          read += (chunk as Buffer).length;
        }
        const digest = hash.digest();
        if (digest.toString('hex') !== normaliseEtag(part.etag)) {
          throw new StorageError('etag_mismatch', `ETag of part ${part.part_number} does not match the stored part`, { part_number: part.part_number });
        }
        partDigests.push(digest);
        sizeBytes += read;
      }
      if (expectedSizeBytes !== undefined && sizeBytes !== expectedSizeBytes) {
        throw new StorageError('size_mismatch', `stored object would be ${sizeBytes} bytes, size_bytes says ${expectedSizeBytes}`, { stored_size_bytes: sizeBytes });
      }
    } catch (err) {
      await out.close();
      await rm(temp, { force: true });
      throw err;
    }
    await out.close();
    await rename(temp, target);
    await rm(dir, { recursive: true, force: true });
    const etag = `"${multipartEtag(partDigests.map((d, i) => ({ part_number: i + 1, etag: d.toString('hex') })))}"`;
    await writeFile(`${target}.etag`, etag, { mode: PRIVATE_MODES.file });
    return { etag, sizeBytes };
  }

  /**
   * Removes half-assembled objects (`*.assembling`) left by a crash: older than `olderThanMs` and
   * named after a process that no longer runs. Returns the removed file names.
   */
  async sweepStaleTemporaries(olderThanMs: number = FILESYSTEM_STORAGE_RULES.staleTemporaryMs, nowMs: number = Date.now()): Promise<string[]> {
    const dir = join(this.root, 'objects');
    const removed: string[] = [];
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      return removed; // nothing stored yet
    }
    for (const name of names) {
      if (!name.endsWith(ASSEMBLING_SUFFIX)) continue;
      const path = join(dir, name);
      try {
        if (nowMs - (await stat(path)).mtimeMs < olderThanMs) continue;
        const owner = parseIdentity((/\.(\d+(?:_\d+)?)\.[0-9a-f]+\.assembling$/.exec(name)?.[1] ?? '').replace('_', ':'));
        if (owner && isProcessAlive(owner)) continue;
        await rm(path, { force: true });
        removed.push(name);
      } catch {
        // vanished meanwhile
      }
    }
    return removed;
  }

  async abortMultipartUpload(_key: string, uploadId: string): Promise<void> {
    if (!UPLOAD_ID_RE.test(uploadId)) return;
    await rm(this.uploadDir(uploadId), { recursive: true, force: true }).catch((err: unknown) => {
      throw diskFailure(`aborting upload ${uploadId}`, err);
    });
  }

  async hasUpload(uploadId: string): Promise<boolean> {
    if (!UPLOAD_ID_RE.test(uploadId)) return false;
    try {
      await readdir(this.uploadDir(uploadId));
      return true;
    } catch {
      return false;
    }
  }

  /** The content type rides in the query and is covered by the signature. */
  async signDownloadUrl(key: string, ttlMs: number, contentType: string | null, baseUrl: string): Promise<string> {
    const type = contentType ?? '';
    return this.signedUrl(baseUrl, 'GET', `/v1/storage/objects/${encodeObjectKey(key)}`, ttlMs, type) + `&content_type=${encodeURIComponent(type)}`;
  }

  async putObject(key: string, data: Buffer): Promise<StoredObject> {
    const target = this.objectPath(key);
    // Written beside it and renamed into place: a reader (another server on the same directory)
    // sees the whole object or none, never a part of it.
    const temp = `${target}.${randomBytes(6).toString('hex')}.tmp`;
    const etag = `"${createHash('md5').update(data).digest('hex')}"`;
    try {
      await mkdir(dirname(target), { recursive: true, mode: PRIVATE_MODES.directory });
      await writeFile(temp, data, { mode: PRIVATE_MODES.file });
      await rename(temp, target);
      await writeFile(`${target}.etag`, etag, { mode: PRIVATE_MODES.file });
    } catch (err) {
      await rm(temp, { force: true }).catch(() => undefined);
      throw diskFailure(`storing object ${key}`, err);
    }
    return { etag, sizeBytes: data.length };
  }

  async getObject(key: string): Promise<Buffer> {
    try {
      return await readFile(this.objectPath(key));
    } catch (err) {
      if (isAbsent(err)) throw new StorageError('object_missing', `object ${key} does not exist`);
      throw diskFailure(`reading object ${key}`, err);
    }
  }

  /** Streams an object, or the inclusive byte range `range` of it. */
  async openObject(key: string, range?: { start: number; end: number }): Promise<Readable> {
    if (!(await this.headObject(key))) throw new StorageError('object_missing', `object ${key} does not exist`);
    return createReadStream(this.objectPath(key), range);
  }

  async headObject(key: string): Promise<StoredObject | null> {
    let info;
    try {
      info = await stat(this.objectPath(key));
    } catch (err) {
      if (isAbsent(err)) return null;
      throw diskFailure(`reading object ${key}`, err);
    }
    const etag = await readFile(`${this.objectPath(key)}.etag`, 'utf8').catch(() => '');
    return { sizeBytes: info.size, etag };
  }

  async deleteObject(key: string): Promise<void> {
    try {
      await rm(this.objectPath(key), { force: true });
      await rm(`${this.objectPath(key)}.etag`, { force: true });
    } catch (err) {
      throw diskFailure(`deleting object ${key}`, err);
    }
  }

  /** Checks a signed request; returns a reason when it must be refused. */
  checkSignature(method: string, path: string, query: { expires?: string; signature?: string; content_type?: string }, nowMs: number): 'ok' | 'invalid_signature' | 'url_expired' {
    const { expires, signature } = query;
    const expiresAtMs = Number(expires);
    if (!expires || !signature || !Number.isSafeInteger(expiresAtMs)) return 'invalid_signature';
    const signed = method === 'GET' ? `${path}#${query.content_type ?? ''}` : path;
    if (!this.signer.verify(method, signed, expiresAtMs, signature)) return 'invalid_signature';
    return expiresAtMs < nowMs ? 'url_expired' : 'ok';
  }

  private signedUrl(baseUrl: string, method: string, path: string, ttlMs: number, contentType?: string): string {
    const expires = Date.now() + ttlMs;
    const signed = contentType === undefined ? path : `${path}#${contentType}`;
    return `${baseUrl}${path}?expires=${expires}&signature=${this.signer.sign(method, signed, expires)}`;
  }

  private objectPath(key: string): string {
    return join(this.root, 'objects', encodeObjectKey(key));
  }

  private uploadDir(uploadId: string): string {
    return join(this.root, 'uploads', uploadId);
  }
}
