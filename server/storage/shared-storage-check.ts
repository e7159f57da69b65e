/**
 * Several server processes on one database must share their object storage (S3, or one directory
 * every process mounts): an asset recorded by one process is read by any other (a session's face,
 * a download). A process whose filesystem storage is its own cannot read what the others wrote.
 * At start-up, a process on PostgreSQL with filesystem storage looks for the latest recorded
 * assets in its storage; when some are missing it says so in one line (docs/operations.md,
 * "Several processes"). The bundled template assets are seeded into every storage instead
 * (services/catalogue-seed.ts), so the default face works whatever the storage.
 */
import type { Db } from '../db/connect.ts';
import { TEMPLATE_ORGANIZATION } from '../services/organizations.ts';
import type { ObjectStorage } from './object-storage.ts';

export const SHARED_STORAGE_CHECK = {
  /** The latest assets of organizations (not templates) looked for at start-up. */
  sample: 5,
} as const;

export interface SharedStorageReport {
  readonly checked: number;
  readonly missing: number;
}

export async function checkSharedStorage(db: Db, storage: ObjectStorage): Promise<SharedStorageReport> {
  const rows: { storage_key: string }[] = await db('assets')
    .whereNot('organization_id', TEMPLATE_ORGANIZATION.organization_id)
    .orderBy('created_at', 'desc')
    .limit(SHARED_STORAGE_CHECK.sample)
    .select('storage_key');
  const found = await Promise.all(rows.map((r) => storage.headObject(r.storage_key).then((o) => o !== null, () => false)));
  return { checked: rows.length, missing: found.filter((f) => !f).length };
}

/** The line a process logs when its storage lacks assets the database records. */
export function unsharedStorageMessage(report: SharedStorageReport, root: string): string {
  return `object storage is not shared: ${report.missing} of the ${report.checked} latest assets recorded in the database are missing from this process's storage (${root}); several processes on one database need S3 storage (STORAGE_DRIVER=s3) or one shared directory (STORAGE_ROOT) (docs/operations.md, "Several processes")`;
}
