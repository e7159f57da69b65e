/**
 * A running service with the `/realtime` face-model endpoint (the builder's realtime surface) and
 * one model configuration created, for tests of the endpoint, the realtime clients and the remote
 * avatar. Stop it with `stop()` (the server closes the endpoint, then the rooms, then its database).
 */
import { facePlugin } from '../../plugins/face/index.ts';
import type { ServerParts } from '../../server/build-server.ts';
import type { RealtimeEndpoint } from '../../server/realtime/index.ts';
import type { MountedRooms } from '../../server/rooms/index.ts';
import { startTestServer, type TestServer } from '../server/harness.ts';

export interface RealtimeServerOptions {
  /** Names the test database and data directory. */
  readonly label: string;
  /** Canvas of the model configuration (small keeps rendering cheap). */
  readonly canvas?: { readonly width: number; readonly height: number };
  readonly variant?: string;
  /**
   * The endpoint's options; `maxSessions` is the process's face session limit
   * (`SVC_MAX_FACE_SESSIONS`), admitted by count only.
   */
  readonly endpoint?: NonNullable<ServerParts['realtime']> & { readonly maxSessions?: number };
  /** Mount embedded rooms and let the endpoint publish avatars into them (`webrtc` sessions). */
  readonly rooms?: boolean;
}

export interface RealtimeServer {
  readonly ts: TestServer;
  readonly endpoint: RealtimeEndpoint;
  /** The embedded rooms, when asked for. */
  readonly rooms: MountedRooms | undefined;
  /** ws:// address of /realtime. */
  readonly url: string;
  readonly configId: string;
  stop(): Promise<void>;
}

export async function startRealtimeServer(options: RealtimeServerOptions): Promise<RealtimeServer> {
  const { maxSessions, ...endpointOptions } = options.endpoint ?? {};
  const ts = await startTestServer({
    label: options.label,
    plugins: [facePlugin],
    // By count only: these tests share a loaded machine, whose load would refuse their sessions at
    // random; the load check has its own tests (test/realtime/security, test/server/operations-overload).
    config: { capacityLoadCheck: false, ...(maxSessions ? { maxFaceSessions: maxSessions } : {}) },
    surfaces: { realtime: true, rooms: options.rooms === true },
    parts: { realtime: endpointOptions },
  });
  const endpoint = ts.server.realtime!;
  const rooms = ts.server.rooms;
  const stop = () => ts.stop();
  try {
    const created = await ts.call('POST', '/v1/model-configs', {
      body: {
        title: `${options.label} portrait`,
        model_variant_id: options.variant ?? 'svc/human-portrait/v1',
        model_configurations: options.canvas ?? { width: 256, height: 192 },
      },
    });
    if (created.status !== 201) throw new Error(`creating the model configuration failed: ${created.status} ${created.text}`);
    return { ts, endpoint, rooms, url: `${ts.url.replace(/^http/, 'ws')}/realtime`, configId: created.body.model_config_id, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
