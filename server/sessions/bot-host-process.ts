/**
 * The bot host: a child process of the server (forked by server/sessions/bot-host.ts) that runs
 * the Session API's bots, so that their pipelines, faces and WebRTC peers (libwebrtc's native
 * calls, resampling, the frame pumps) never share an event loop with the REST API, and a crash in
 * them does not take the API down. It owns the embedded session rooms and their visitors'
 * signalling sockets (handed over by the server with their sockets). It has no database: the
 * server admits, resolves each session's face and writes the call records; the host runs bots
 * and reports how they ended.
 *
 * It ends when told (`shutdown`), or when its server goes away (the IPC channel closes): its
 * sessions end first (`server_shutdown`), within SESSION_TIMEOUTS.stopTimeoutMs plus a margin.
 * SIGTERM and SIGINT are left to the server, which stops the host in order (a terminal's Ctrl-C
 * reaches the whole process group).
 */
import type { Socket } from 'node:net';
import { setPriority } from 'node:os';
import pino from 'pino';
import { Registry } from '../../core/registry.ts';
import { BotRunner } from '../../agent/bot-runner.ts';
import { ProviderStartError } from '../../agent/agent-pipeline.ts';
import type { SessionOutcome } from '../../agent/session-contract.ts';
import { SESSION_TIMEOUTS } from '../../agent/session-contract.ts';
import type { FaceModel } from '../../processors/avatar/face-model.ts';
import { WebhookClient } from '../../processors/tools/index.ts';
import { RoomRegistry } from '../../transports/webrtc/room-registry.ts';
import { loadDefaultPlugins } from '../default-plugins.ts';
import { heapGrowthFromEnv } from '../config/env.ts';
import { applyHeapGrowth } from '../operations/heap-growth.ts';
import { createRoomSignallingHandler } from '../rooms/room-signalling.ts';
import { createResolvedFaceOpener, type ResolvedSessionFace } from './agent-face.ts';
import type { BotHostInit, FromHost, HostReplyValue, HostRequest, ToHost } from './bot-host-protocol.ts';

const send = (message: FromHost): void => {
  if (process.connected) process.send!(message);
};

/** How often rooms left empty are swept (as mountRooms does in the server). */
const ROOM_SWEEP_MS = 30_000;

let host: Awaited<ReturnType<typeof startHost>> | undefined;
let starting: Promise<void> | undefined;
const early: Array<{ message: ToHost; handle: unknown }> = [];

// The server checked SVC_HEAP_GROWING_PERCENT before it forked this process (same environment).
applyHeapGrowth(heapGrowthFromEnv());

process.on('SIGTERM', () => undefined);
process.on('SIGINT', () => undefined);
process.on('disconnect', () => void stopAndExit('server_shutdown'));

process.on('message', (message: ToHost, handle: unknown) => {
  if (message.t === 'init') {
    starting ??= startHost(message.init).then((h) => {
      host = h;
      send({ t: 'ready' });
      for (const m of early.splice(0)) h.handle(m.message, m.handle);
    });
    starting.catch((err: Error) => {
      process.stderr.write(`bot host cannot start: ${err.stack ?? err.message}\n`);
      process.exit(1);
    });
    return;
  }
  if (host) host.handle(message, handle);
  else early.push({ message, handle });
});

let exiting = false;
async function stopAndExit(reason: 'server_shutdown'): Promise<void> {
  if (exiting) return;
  exiting = true;
  const hardStop = setTimeout(() => process.exit(0), SESSION_TIMEOUTS.stopTimeoutMs + 2_000);
  hardStop.unref();
  await host?.close(reason).catch(() => undefined);
  clearTimeout(hardStop);
  process.exit(0);
}

async function startHost(init: BotHostInit) {
  const logger = pino({ level: init.logLevel, base: { component: 'bot-host', pid: process.pid } }, pino.destination({ dest: 1, sync: false }));
  try {
    // Every thread started from now on (render workers, libwebrtc's) inherits it.
    if (init.nice !== 0) setPriority(init.nice);
  } catch (err) {
    logger.warn({ err, nice: init.nice }, 'could not set the bot host\'s priority; it runs at the server\'s');
  }
  const registry = new Registry();
  await loadDefaultPlugins(registry, logger);
  const rooms = new RoomRegistry({ iceAllowedRanges: init.iceAllowedRanges, network: init.rtc });
  const signalling = createRoomSignallingHandler({ rooms, log: (event, details) => logger.info(details, event) });
  const sweeper = setInterval(() => rooms.sweep(), ROOM_SWEEP_MS);
  sweeper.unref();

  // Frame lateness and CPU, reported to the server (its capacity gate and /metrics).
  let lateness: number[] = [];
  const load = (): FromHost => {
    const peaks: Record<string, number> = {};
    for (const [sessionId, bot] of running) peaks[sessionId] = bot.participantPeak;
    const report: FromHost = { t: 'load', lateness, cpu: process.cpuUsage(), peaks };
    lateness = [];
    return report;
  };
  const reporter = setInterval(() => send(load()), init.loadReportMs);
  reporter.unref();

  // By the session's own agent record (each `start` message brings a new one): two sessions of
  // one agent never take each other's face, even across an edit of the agent.
  const faces = new WeakMap<object, ResolvedSessionFace>();
  const openResolved = createResolvedFaceOpener(registry);
  const runner = new BotRunner({
    registry,
    providers: init.providers,
    rooms,
    webhooks: new WebhookClient({ allowedRanges: init.webhookAllowedRanges }),
    logger: logger.child({ component: 'bot' }),
    ...(init.timeouts ? { timeouts: init.timeouts } : {}),
    ...(init.tuning ? { tuning: init.tuning } : {}),
    openFace: async (agent, clock, limits) => {
      const face = faces.get(agent);
      if (!face) throw new Error(`no face was resolved for agent ${agent.agent_id}`);
      const session = await openResolved(face, clock, limits);
      session.frames.subscribe({ next: (f) => lateness.push(clock.now() - session.startedAtMs - f.ptsMs), error: () => undefined });
      return session;
    },
  });
  const running = new Map<string, Awaited<ReturnType<BotRunner['start']>>>();

  // The face engine and the offline engines load now, not in the first visitor's session.
  void (async () => {
    const source = await registry.create<FaceModel>('face', 'human-portrait').openSource();
    (source as { close?: () => void }).close?.();
    await registry.warmUp((plugin, err) => logger.warn({ err, plugin }, 'plugin warm-up failed; its first use pays for it instead'));
  })().catch((err) => logger.warn({ err }, 'bot host warm-up failed'));

  async function request(message: HostRequest): Promise<HostReplyValue> {
    switch (message.t) {
      case 'create-room':
        return rooms.createRoom({
          name: message.name,
          ...(message.tokenTtlMs === undefined ? {} : { tokenTtlMs: message.tokenTtlMs }),
          ...(message.mediaTtlMs === undefined ? {} : { mediaTtlMs: message.mediaTtlMs }),
        });
      case 'close-room':
        return rooms.closeRoom(message.room, 'session released');
      case 'start': {
        const { session } = message;
        faces.set(session.agent, message.face);
        const bot = await runner.start(session);
        running.set(session.sessionId, bot);
        void bot.ended.then(
          (outcome) => report(session.sessionId, outcome),
          (err: Error) => report(session.sessionId, { terminationReason: 'pipeline_error', failureDetail: err?.message ?? String(err), participantCount: 0, metadata: {} }),
        );
        return null;
      }
      case 'stop': {
        const bot = running.get(message.sessionId);
        return bot ? bot.stop(message.reason) : null;
      }
    }
  }

  function report(sessionId: string, outcome: SessionOutcome): void {
    running.delete(sessionId);
    send({ t: 'ended', sessionId, outcome });
  }

  return {
    handle(message: ToHost, handle: unknown): void {
      if (message.t === 'upgrade') {
        const socket = handle as Socket | undefined;
        if (!socket) return;
        try {
          signalling.handleUpgrade({ url: message.url, method: message.method, headers: message.headers }, socket, Buffer.from(message.head));
        } catch (err) {
          logger.warn({ err }, 'a handed-over signalling upgrade failed');
          socket.destroy();
        }
        return;
      }
      if (message.t === 'shutdown') {
        void stopAndExit('server_shutdown');
        return;
      }
      if (message.t === 'init') return;
      request(message).then(
        (value) => send({ t: 'reply', id: message.id, ok: true, value }),
        (err: Error) => send({ t: 'reply', id: message.id, ok: false, error: err?.message ?? String(err), ...(err instanceof ProviderStartError ? { code: err.code } : {}) }),
      );
    },
    async close(reason: 'server_shutdown'): Promise<void> {
      await runner.stopAll(reason);
      clearInterval(reporter);
      clearInterval(sweeper);
      send(load());
      rooms.closeAll();
      await signalling.close();
    },
  };
}
