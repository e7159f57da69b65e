/**
 * What every role of the server stands on, below HTTP: the database (opened and migrated), object
 * storage, the application services, the catalogue seed, the sweeps of abandoned uploads and of a
 * crashed predecessor's leftovers, and the generation-job worker when this process runs one.
 */
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { Registry } from '../../core/registry.ts';
import { SERVER_DEFAULTS, type ServerConfig } from '../config/server-config.ts';
import { closeDatabase, openDatabase, warmPool, type Db } from '../db/connect.ts';
import { migrateToLatest } from '../db/migrate.ts';
import { registerIdleVideoGenerator, sweepStaleWorkDirs } from '../jobs/idle-video-generator.ts';
import { securePrivateData } from '../security/private-files.ts';
import { SecretBox } from '../security/secret-box.ts';
import { UrlSigner } from '../security/url-signer.ts';
import { createObjectStorage, FilesystemStorage, type ObjectStorage } from '../storage/index.ts';
import { AgentCalls } from './agent-calls.ts';
import { Agents } from './agents.ts';
import { ApiKeys } from './api-keys.ts';
import { Assets } from './assets.ts';
import { seedCatalogue } from './catalogue-seed.ts';
import { checkSharedStorage, unsharedStorageMessage } from '../storage/shared-storage-check.ts';
import { GenerationJobs } from './generation-jobs.ts';
import type { Services } from './index.ts';
import { ModelConfigs } from './model-configs.ts';
import { ModelVariants } from './model-variants.ts';
import { Organizations } from './organizations.ts';

/** The data side of a server: what its surfaces call into. */
export interface ServiceCore {
  readonly config: ServerConfig;
  readonly db: Db;
  readonly storage: ObjectStorage;
  /** Registry holding the plugins (face, sts, asset hooks, generators). */
  readonly registry: Registry;
  readonly services: Services;
  readonly logger: Logger;
  /** Waits for background work (asset hooks, generation jobs); for tests and shutdown. */
  settled(): Promise<void>;
  /** Stops the job worker and the sweeps, waits for background work, closes the database. */
  close(): Promise<void>;
}

export async function openServices(config: ServerConfig, registry: Registry, logger: Logger): Promise<ServiceCore> {
  registerIdleVideoGenerator(registry, { ffmpegPath: config.ffmpegPath });
  securePrivateData(config, logger); // SVC_DATA_DIR, PGlite and stored objects: the server's user only (issue 32)
  const db = openDatabase({ databaseUrl: config.databaseUrl, pgliteDir: join(config.dataDir, 'pglite'), timeouts: config.database, logger });
  await migrateToLatest(db);
  await warmPool(db); // the kept connections open before the first burst needs them
  const storage = createObjectStorage(config.storage, join(config.dataDir, 'objects'), new UrlSigner(config.signingSecret));
  const assets = new Assets(db, storage, registry, logger, config.signedUrlTtlMs);
  const services: Services = {
    organizations: new Organizations(db),
    apiKeys: new ApiKeys(db),
    modelVariants: new ModelVariants(db),
    modelConfigs: new ModelConfigs(db, { storage, registry, assets, logger }),
    assets,
    agents: new Agents(db, new SecretBox(config.encryptionKey), registry),
    agentCalls: new AgentCalls(db),
    generationJobs: new GenerationJobs(db, registry, assets, storage, logger, config.jobs),
  };
  await seedCatalogue(db, registry, assets);
  if (config.databaseUrl && config.storage.driver === 'filesystem') {
    const report = await checkSharedStorage(db, storage);
    if (report.missing > 0) logger.warn({ ...report }, unsharedStorageMessage(report, config.storage.root ?? join(config.dataDir, 'objects')));
  }
  // Jobs are durable (docs/jobs.md): a worker here unless SVC_WORKER=off; any worker reclaims interrupted ones.
  if (config.jobs.runWorker) services.generationJobs.startWorker();
  const sweepUploads = () => assets.sweepAbandonedUploads(new Date(Date.now() - config.uploadSessionTtlMs));
  await sweepUploads();
  // Leftovers of a crashed process (this one's predecessor, or a sibling sharing the storage):
  // half-assembled objects and idle-video work folders. At start and with the hourly upload sweep.
  const sweepLeftovers = async () => {
    if (storage instanceof FilesystemStorage) await storage.sweepStaleTemporaries().catch((err) => logger.warn({ err }, 'storage temporaries sweep failed'));
    await sweepStaleWorkDirs().catch((err) => logger.warn({ err }, 'generation work folder sweep failed'));
  };
  await sweepLeftovers();
  // Finished jobs past their retention: not awaited at start (a first pass over a long-lived
  // table deletes up to JOB_SWEEP's bound, which a start need not wait for).
  const sweepJobs = () =>
    services.generationJobs.sweepFinished().then(
      (n) => n > 0 && logger.info({ deleted: n }, 'finished generation jobs past their retention deleted'),
      (err: unknown) => logger.warn({ err }, 'finished job sweep failed'),
    );
  // The pass in flight (the first at start, then the hourly ones): close() waits for it.
  let jobSweep = sweepJobs();
  const sweepTimer = setInterval(() => {
    void sweepUploads().catch((err) => logger.warn({ err }, 'upload sweep failed'));
    void sweepLeftovers();
    jobSweep = jobSweep.then(sweepJobs);
  }, SERVER_DEFAULTS.uploadSweepIntervalMs);
  sweepTimer.unref();

  return {
    config, db, storage, registry, services, logger,
    async settled() {
      await services.generationJobs.settled();
      await assets.settled();
    },
    async close() {
      clearInterval(sweepTimer);
      await jobSweep;
      await services.generationJobs.close();
      await assets.settled();
      await closeDatabase(db);
    },
  };
}
