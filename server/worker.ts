/**
 * `npm run worker`: a generation-job worker without the HTTP API (docs/jobs.md). Any number of
 * them, on any machines, share the API servers' PostgreSQL (DATABASE_URL) and object storage
 * (the same STORAGE_* / SVC_DATA_DIR settings); run the API with SVC_WORKER=off to keep jobs off
 * its cores. SIGTERM / SIGINT: running jobs are given back to the queue (their attempt not
 * counted) and the process exits 0; a second signal exits at once.
 */
import { join } from 'node:path';
import { pino } from 'pino';
import { Registry } from '../core/registry.ts';
import { closeDatabase, openDatabase } from './db/connect.ts';
import { migrateToLatest } from './db/migrate.ts';
import { loadDefaultPlugins } from './default-plugins.ts';
import { loadConfigFromEnv } from './config/env.ts';
import { registerIdleVideoGenerator, sweepStaleWorkDirs } from './jobs/idle-video-generator.ts';
import { UrlSigner } from './security/url-signer.ts';
import { Assets } from './services/assets.ts';
import { GenerationJobs } from './services/generation-jobs.ts';
import { createObjectStorage } from './storage/index.ts';

const config = (() => {
  try {
    const loaded = loadConfigFromEnv();
    if (!loaded.databaseUrl) {
      throw new Error('npm run worker needs DATABASE_URL (PostgreSQL): the embedded database belongs to one process, and `npm start` runs its jobs itself');
    }
    return loaded;
  } catch (err) {
    process.stderr.write(`svc worker configuration error: ${(err as Error).message}\n`);
    process.exit(1);
  }
})();

const logger = pino({ level: config.logLevel });
const registry = new Registry();
const plugins = await loadDefaultPlugins(registry, logger);
registerIdleVideoGenerator(registry, { ffmpegPath: config.ffmpegPath });
const db = openDatabase({ databaseUrl: config.databaseUrl, pgliteDir: join(config.dataDir, 'pglite'), timeouts: config.database, logger });
try {
  await migrateToLatest(db);
} catch (err) {
  process.stderr.write(`svc worker cannot open the database: ${(err as Error).message}\n`);
  process.exit(1);
}
const storage = createObjectStorage(config.storage, join(config.dataDir, 'objects'), new UrlSigner(config.signingSecret));
const assets = new Assets(db, storage, registry, logger, config.signedUrlTtlMs);
const jobs = new GenerationJobs(db, registry, assets, storage, logger, config.jobs);
await sweepStaleWorkDirs().catch((err) => logger.warn({ err }, 'generation work folder sweep failed'));
const worker = jobs.startWorker();
process.stdout.write(
  `svc worker ${worker.runnerId} running generation jobs (${jobs.settings.concurrency} at once, ${jobs.settings.organizationConcurrency} per organization; plugins: ${plugins.join(', ') || '(none)'})\n`,
);

let stopping = false;
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (stopping) process.exit(128 + (signal === 'SIGINT' ? 2 : 15));
    stopping = true;
    logger.info({ signal }, 'worker stopping: giving running jobs back to the queue');
    void jobs
      .close()
      .then(() => assets.settled())
      .then(() => closeDatabase(db))
      .catch((err: unknown) => logger.error({ err }, 'worker shutdown step failed'))
      .finally(() => process.exit(0));
  });
}
