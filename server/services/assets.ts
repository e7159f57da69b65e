import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Registry } from '../../core/registry.ts';
import { affectedRows, type Db } from '../db/connect.ts';
import { int, isoRequired } from '../db/row-values.ts';
import { ApiError } from '../http/api-error.ts';
import { envelope, type ListEnvelope, type Page } from '../http/pagination.ts';
import type { Principal } from '../http/principal.ts';
import { multipartEtag, normaliseEtag, StorageError, StorageUnavailableError, type CompletedPart, type ObjectStorage, type StoredObject } from '../storage/object-storage.ts';
import { assetHooks, imageTooLarge, isImageAsset } from './asset-hooks.ts';
import { TEMPLATE_ORGANIZATION } from './organizations.ts';

export interface AssetFilter {
  source?: 'org' | 'template';
  category?: string;
  name?: string;
}

interface FinalizeBody {
  asset_id: string;
  upload_id: string;
  name: string;
  category: string;
  content_type: string | null;
  size_bytes: number;
  s3_key?: string;
  parts: CompletedPart[];
}

/**
 * A finalize claims its upload session before touching storage by rewriting the session's
 * `upload_id` to `finalizing:<upload_id>` in one conditional UPDATE: of concurrent finalizes
 * exactly one matches the open session; the others see the claim and answer 409
 * `upload_conflict` (`reason: already_finalized`) without touching the parts or the object.
 * The claim carries a token and its time (`claim_token`, `claimed_at`): everything the finalize
 * does to the session afterwards (give it back, delete it) matches its own token, and a claim
 * older than `FINALIZE_CLAIM_STALE_MS` is taken over by the next finalize (its finalize died, or
 * could not give it back with the database down); the old holder, if it was only slow, then
 * matches nothing.
 */
const CLAIM_PREFIX = 'finalizing:';
/** Longer than any finalize runs (S3 may take minutes to assemble a large object). */
export const FINALIZE_CLAIM_STALE_MS = 15 * 60 * 1000;
const alreadyFinalized = (id: string) =>
  new ApiError('upload_conflict', `upload of asset ${id} is being finalized by another request`, { reason: 'already_finalized', asset_id: id });

const notFound = (id: string) => new ApiError('asset_not_found', `asset ${id} not found`, { asset_id: id });
const uploadNotFound = (id: string) => new ApiError('upload_not_found', `no open upload session for asset ${id}`, { asset_id: id });

/** Assets and their multipart upload protocol (spec "Multipart asset upload"). */
export class Assets {
  /** Finishes when every asset hook started so far has run (tests and shutdown wait on it). */
  private pendingHooks = new Set<Promise<void>>();

  constructor(
    private readonly db: Db,
    private readonly storage: ObjectStorage,
    private readonly registry: Registry,
    private readonly logger: Logger,
    private readonly urlTtlMs: number,
  ) {}

  async initiateUpload(principal: Principal, body: { name: string; category: string; content_type?: string | null; size_bytes?: number | null }) {
    const assetId = randomUUID();
    const key = `${principal.organizationId}/${assetId}`;
    const uploadId = await this.storage.createMultipartUpload(key, body.content_type ?? null);
    await this.db('upload_sessions').insert({
      asset_id: assetId,
      upload_id: uploadId,
      organization_id: principal.organizationId,
      created_by: principal.createdBy,
      name: body.name,
      category: body.category,
      content_type: body.content_type ?? null,
      size_bytes: body.size_bytes ?? null,
      storage_key: key,
    });
    return { asset_id: assetId, upload_id: uploadId, s3_key: key };
  }

  /** `baseUrl` (here and below): `{base_url}` as the client reaches the service, for signed URLs. */
  async signPart(principal: Principal, body: { asset_id: string; upload_id: string; part_number: number; s3_key?: string }, baseUrl: string) {
    const session = await this.session(principal, body.asset_id, body.upload_id, body.s3_key);
    const url = await this.storage.signUploadPartUrl(session.storage_key, session.upload_id, body.part_number, this.urlTtlMs, baseUrl);
    return { upload_url: url, part_number: body.part_number };
  }

  async finalize(principal: Principal, body: FinalizeBody, baseUrl: string) {
    // One read decides both answers: a second read could find the session claimed by a racing
    // finalize after the first found it open, and call a conflict "not found".
    const row = await this.db('upload_sessions')
      .where({ asset_id: body.asset_id, organization_id: principal.organizationId })
      .first('*', this.db.raw('coalesce(claimed_at, created_at) < now() - make_interval(secs => ?) as claim_stale', [FINALIZE_CLAIM_STALE_MS / 1000]));
    const claimedBefore = row?.upload_id === CLAIM_PREFIX + body.upload_id;
    if (claimedBefore && !row.claim_stale) throw alreadyFinalized(body.asset_id);
    const session = this.openSession(claimedBefore ? { ...row, upload_id: body.upload_id } : row, body.asset_id, body.upload_id, body.s3_key);
    const mismatched = (['name', 'category'] as const).filter((f) => session[f] !== body[f]);
    if (session.size_bytes != null && int(session.size_bytes) !== body.size_bytes) mismatched.push('size_bytes' as never);
    if (mismatched.length) {
      throw new ApiError('upload_conflict', `${mismatched.join(', ')} differ from the upload initiation`, { reason: 'initiation_mismatch', fields: mismatched });
    }
    body.parts.forEach((part, index) => {
      if (part.part_number !== index + 1) {
        throw new ApiError('validation_failed', `parts must be numbered sequentially from 1; item ${index} has part_number ${part.part_number}`, {
          issues: [{ location: 'body', path: `/parts/${index}/part_number`, message: `must be ${index + 1}` }],
        });
      }
    });
    // Claim first, then assemble: a loser never reaches the storage driver.
    const claim = CLAIM_PREFIX + session.upload_id;
    const token = randomUUID();
    const ours = { asset_id: body.asset_id, upload_id: claim, claim_token: token };
    if (claimedBefore) {
      // A stale claim, taken over only if it is still the one read (a racing finalize may have
      // taken it over first): what its holder assembled, if anything, is recorded below.
      // (knex reads a null in the object as IS NULL: a claim older than its token column.)
      const stale = this.db('upload_sessions').where({ asset_id: body.asset_id, upload_id: claim, claim_token: row.claim_token ?? null });
      if (!affectedRows(await stale.update({ claim_token: token, claimed_at: this.db.fn.now() }))) throw alreadyFinalized(body.asset_id);
      this.logger.warn({ asset_id: body.asset_id }, 'finalize: took over a stale finalize claim');
    } else {
      for (let attempt = 0; ; attempt++) {
        const claimed = affectedRows(
          await this.db('upload_sessions')
            .where({ asset_id: body.asset_id, organization_id: principal.organizationId, upload_id: session.upload_id })
            .update({ upload_id: claim, claim_token: token, claimed_at: this.db.fn.now() }),
        );
        if (claimed) break;
        const now = await this.db('upload_sessions').where({ asset_id: body.asset_id, organization_id: principal.organizationId }).first('upload_id');
        if (now?.upload_id === claim) throw alreadyFinalized(body.asset_id);
        // Claimed and released again by a racing finalize that failed its verification: the
        // session is open, so claim it (a bounded number of times; then it is a conflict).
        if (now?.upload_id === session.upload_id) {
          if (attempt < 3) continue;
          throw alreadyFinalized(body.asset_id);
        }
        throw uploadNotFound(body.asset_id); // finished (or swept) in between
      }
    }
    // A verification failure leaves the parts as they were: the claim is released, the client
    // may fix its request and finalize again.
    const release = () =>
      this.db('upload_sessions').where(ours).update({ upload_id: session.upload_id, claim_token: null, claimed_at: null })
        .catch((err) => this.logger.warn({ err, asset_id: body.asset_id }, 'releasing an upload finalize claim failed; the upload sweep will abort it'));
    let stored;
    try {
      stored = await this.storage.completeMultipartUpload(session.storage_key, session.upload_id, body.parts, body.size_bytes);
    } catch (err) {
      // The parts are gone because they were assembled already: a finalize whose answer was lost
      // (its assembly succeeded, then the storage, the database or the connection failed) is sent
      // again, or S3 was retried by its SDK after completing. The object is recorded, not orphaned.
      let earlier: StoredObject | undefined;
      if (err instanceof StorageError && (err.code === 'upload_missing' || err.code === 'part_missing')) {
        earlier = await this.assembledEarlier(session.storage_key, body).catch(async (headErr: unknown) => {
          await release();
          throw headErr;
        });
      }
      if (!earlier) {
        await release();
        if (err instanceof StorageError) throw new ApiError('upload_conflict', err.message, { reason: err.code, ...err.details });
        throw err;
      }
      this.logger.info({ asset_id: body.asset_id }, 'finalize: the parts were assembled by an earlier attempt; recording that object');
      stored = earlier;
    }
    if (stored.sizeBytes !== body.size_bytes) {
      // Drivers that publish before the size is known (S3) consumed the parts: restart only. The
      // object not deleted (the storage failing): the claim is given back, and the upload sweep
      // deletes the object with the session (no asset records it).
      await this.storage.deleteObject(session.storage_key).catch(async (err: unknown) => {
        await release();
        throw err;
      });
      await this.db('upload_sessions').where(ours).delete();
      throw new ApiError('upload_conflict', `stored object is ${stored.sizeBytes} bytes, size_bytes says ${body.size_bytes}`, { reason: 'size_mismatch', stored_size_bytes: stored.sizeBytes });
    }
    try {
      await this.db.transaction(async (trx) => {
        const removed = affectedRows(await trx('upload_sessions').where(ours).delete());
        if (!removed) throw alreadyFinalized(body.asset_id); // swept or taken over meanwhile: not ours any more
        await trx('assets').insert({
        asset_id: body.asset_id,
        organization_id: principal.organizationId,
        created_by: session.created_by,
        name: body.name,
        category: body.category,
        content_type: body.content_type,
        size_bytes: stored.sizeBytes,
        etag: stored.etag,
        storage_key: session.storage_key,
      });
      });
    } catch (err) {
      // The object is stored but not recorded (database down): give the session back; a retry
      // finds the parts consumed (409 part_missing) and restarts the upload.
      await release();
      throw err;
    }
    const asset = await this.db('assets').where('asset_id', body.asset_id).first();
    this.runHooks(asset);
    return this.withUrl(asset, false, baseUrl);
  }

  /**
   * The object of a recorded asset, written from `data` when this process's storage lacks it
   * (template seeding: another process on the same database recorded the asset in its own
   * storage). True when it had to be restored.
   */
  async restoreObject(assetId: string, data: Buffer): Promise<boolean> {
    const row = await this.db('assets').where('asset_id', assetId).first('storage_key', 'content_type');
    if (!row || (await this.storage.headObject(row.storage_key))) return false;
    await this.storage.putObject(row.storage_key, data, row.content_type);
    return true;
  }

  /** Stores a complete object as an asset (template seeding, generated assets). */
  async createFromBytes(organizationId: string, createdBy: string, file: { asset_id?: string; name: string; category: string; content_type: string | null; data: Buffer }) {
    const assetId = file.asset_id ?? randomUUID();
    const key = `${organizationId}/${assetId}`;
    const stored = await this.storage.putObject(key, file.data, file.content_type);
    await this.db('assets')
      .insert({ asset_id: assetId, organization_id: organizationId, created_by: createdBy, name: file.name, category: file.category, content_type: file.content_type, size_bytes: stored.sizeBytes, etag: stored.etag, storage_key: key })
      .onConflict('asset_id')
      .ignore();
    const asset = await this.db('assets').where('asset_id', assetId).first();
    this.runHooks(asset);
    return asset;
  }

  async list(principal: Principal, filter: AssetFilter, page: Page, baseUrl: string): Promise<ListEnvelope<Record<string, unknown>>> {
    const org = filter.source === 'template' ? TEMPLATE_ORGANIZATION.organization_id : principal.organizationId;
    const scope = this.db('assets').where('organization_id', org);
    if (filter.category) scope.where('category', filter.category);
    if (filter.name) scope.whereRaw(`name ILIKE ? ESCAPE '\\'`, [`%${filter.name.replace(/[\\%_]/g, (c) => `\\${c}`)}%`]);
    const [rows, total] = await Promise.all([
      scope.clone().orderBy([{ column: 'created_at', order: 'desc' }, { column: 'asset_id' }]).limit(page.limit).offset(page.offset),
      scope.clone().count('* as n').first(),
    ]);
    return envelope(await Promise.all(rows.map((r) => this.withUrl(r, false, baseUrl))), page, Number(total?.n ?? 0));
  }

  /** Own and template assets are readable. */
  async get(principal: Principal, assetId: string, baseUrl: string) {
    const row = await this.db('assets')
      .where('asset_id', assetId)
      .whereIn('organization_id', [principal.organizationId, TEMPLATE_ORGANIZATION.organization_id])
      .first();
    if (!row) throw notFound(assetId);
    return this.withUrl(row, false, baseUrl);
  }

  async getPublic(assetId: string, baseUrl: string) {
    const row = await this.db('assets').where('asset_id', assetId).first();
    if (!row) throw notFound(assetId);
    return this.withUrl(row, true, baseUrl);
  }

  /** A fresh signed URL for an asset id, or null when no such asset exists (preview_url resolution). */
  async signedUrlFor(assetId: string, organizationId: string, baseUrl: string): Promise<string | null> {
    const row = await this.db('assets')
      .where('asset_id', assetId)
      .whereIn('organization_id', [organizationId, TEMPLATE_ORGANIZATION.organization_id])
      .first('storage_key', 'content_type');
    return row ? this.storage.signDownloadUrl(row.storage_key, this.urlTtlMs, row.content_type, baseUrl) : null;
  }

  /**
   * The object an earlier finalize of these very parts assembled at `key`, if there is one: its
   * ETag is the multipart ETag of the parts the client names (MD5s of their contents) and its
   * size is `size_bytes`. Anything else (no object, other parts, ETags that are not MD5s) is not.
   */
  private async assembledEarlier(key: string, body: FinalizeBody): Promise<StoredObject | undefined> {
    const expected = multipartEtag(body.parts);
    if (!expected) return undefined;
    const head = await this.storage.headObject(key);
    return head && normaliseEtag(head.etag) === expected && head.sizeBytes === body.size_bytes ? head : undefined;
  }

  /** Hard delete of record and object; template assets are read-only for everyone. */
  async delete(principal: Principal, assetId: string): Promise<void> {
    const row = await this.db('assets')
      .where('asset_id', assetId)
      .whereIn('organization_id', [principal.organizationId, TEMPLATE_ORGANIZATION.organization_id])
      .first();
    if (!row) throw notFound(assetId);
    if (row.organization_id !== principal.organizationId) {
      throw new ApiError('template_read_only', `template asset ${assetId} cannot be deleted`, { asset_id: assetId });
    }
    // The object first: with the storage down the asset stays listed and the DELETE can be sent
    // again (503); with the database down after it, the row names a missing object and a retry
    // removes it (deleting a missing object succeeds). The other order left objects nobody could delete.
    await this.storage.deleteObject(row.storage_key);
    await this.db('assets').where('asset_id', assetId).delete();
  }

  /** Row by id in the caller's organization (generation jobs read source images). */
  async ownedRow(principal: Principal, assetId: string): Promise<any> {
    const row = await this.db('assets')
      .where('asset_id', assetId)
      .whereIn('organization_id', [principal.organizationId, TEMPLATE_ORGANIZATION.organization_id])
      .first();
    if (!row) throw notFound(assetId);
    return row;
  }

  /** Aborts upload sessions opened before `olderThan` and never finalized; returns how many. */
  async sweepAbandonedUploads(olderThan: Date): Promise<number> {
    const stale = await this.db('upload_sessions').where('created_at', '<', olderThan).select('asset_id', 'upload_id', 'storage_key');
    let swept = 0;
    for (const session of stale) {
      const claimed = String(session.upload_id).startsWith(CLAIM_PREFIX);
      const uploadId = claimed ? String(session.upload_id).slice(CLAIM_PREFIX.length) : session.upload_id;
      try {
        await this.storage.abortMultipartUpload(session.storage_key, uploadId);
        // The object may have been assembled without its record: by a finalize that died holding
        // its claim, or one that gave its claim back after the assembly (its answer lost, the
        // database failing) and was never sent again.
        if (!(await this.db('assets').where('asset_id', session.asset_id).first('asset_id'))) await this.storage.deleteObject(session.storage_key);
      } catch (err) {
        // The storage unavailable: the session is kept, and the next sweep tries again (its parts
        // or object would otherwise be left with nothing naming them).
        this.logger.warn({ err, asset_id: session.asset_id }, 'sweeping an abandoned upload failed; kept for the next sweep');
        continue;
      }
      await this.db('upload_sessions').where('asset_id', session.asset_id).delete();
      swept++;
    }
    return swept;
  }

  async settled(): Promise<void> {
    while (this.pendingHooks.size) await Promise.all([...this.pendingHooks]);
  }

  private async session(principal: Principal, assetId: string, uploadId: string, key?: string): Promise<any> {
    const session = await this.db('upload_sessions').where({ asset_id: assetId, organization_id: principal.organizationId }).first();
    return this.openSession(session, assetId, uploadId, key);
  }

  private openSession(session: any, assetId: string, uploadId: string, key?: string): any {
    if (!session || session.upload_id !== uploadId || (key !== undefined && key !== session.storage_key)) throw uploadNotFound(assetId);
    return session;
  }

  private async withUrl(row: any, publicShape: boolean, baseUrl: string): Promise<Record<string, unknown>> {
    const asset: Record<string, unknown> = {
      asset_id: row.asset_id,
      organization_id: row.organization_id,
      created_by: row.created_by,
      name: row.name,
      category: row.category,
      content_type: row.content_type,
      size_bytes: int(row.size_bytes),
      etag: row.etag,
      created_at: isoRequired(row.created_at),
      updated_at: isoRequired(row.updated_at),
      asset_url: await this.storage.signDownloadUrl(row.storage_key, this.urlTtlMs, row.content_type, baseUrl),
    };
    if (publicShape) {
      delete asset.organization_id;
      delete asset.created_by;
    }
    return asset;
  }

  /**
   * Runs the asset hooks whose result an image asset does not have yet (assets stored before a
   * hook was installed, e.g. the seeded template face after adding the face plugin).
   */
  async ensureAnalysed(assetId: string): Promise<void> {
    const row = await this.db('assets').where('asset_id', assetId).first();
    if (row) this.runHooks(row, Object.keys(row.analysis ?? {}));
  }

  private runHooks(row: any, done: string[] = []): void {
    if (!isImageAsset(row)) return;
    const tooLarge = imageTooLarge(int(row.size_bytes));
    for (const { slug, hook } of assetHooks(this.registry)) {
      if (!hook.onImageAssetFinalized || done.includes(slug)) continue;
      const run = (async () => {
        let analysis: Record<string, unknown>;
        try {
          if (tooLarge) throw new Error(tooLarge);
          analysis = (await hook.onImageAssetFinalized!({
            asset_id: row.asset_id,
            organization_id: row.organization_id,
            name: row.name,
            category: row.category,
            content_type: row.content_type,
            size_bytes: int(row.size_bytes),
            read: () => this.storage.getObject(row.storage_key),
          })) ?? {};
        } catch (err) {
          if (err instanceof StorageUnavailableError) {
            // Not the image's fault: nothing recorded, so the check stays pending and runs again
            // (ensureAnalysed, or the session's own pass) once the storage answers.
            this.logger.warn({ err, asset_id: row.asset_id, hook: slug }, 'asset hook could not read the image: the object storage is unavailable');
            return;
          }
          this.logger.warn({ err, asset_id: row.asset_id, hook: slug }, 'asset hook failed');
          analysis = { error: (err as Error).message };
        }
        await this.db('assets')
          .where('asset_id', row.asset_id)
          .update({ analysis: this.db.raw(`jsonb_set(analysis, ?, ?::jsonb)`, [`{${slug}}`, JSON.stringify(analysis)]) })
          .catch((err) => this.logger.warn({ err, asset_id: row.asset_id }, 'storing asset analysis failed'));
      })();
      this.pendingHooks.add(run);
      void run.finally(() => this.pendingHooks.delete(run));
    }
  }
}
