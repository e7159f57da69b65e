/**
 * A running service with the `/realtime` face-model endpoint mounted and one model configuration
 * created, for tests of the endpoint, the realtime clients and the remote avatar: what several
 * test files set up by hand. Stop it with `stop()` (endpoint first, then the rooms, then the
 * server and its database).
 */
import { facePlugin } from '../../plugins/face/index.ts';
import { mountRealtime, type RealtimeEndpoint } from '../../server/realtime/index.ts';
import { mountRooms, type MountedRooms } from '../../server/rooms/index.ts';
import { startTestServer, type TestServer } from '../server/harness.ts';

export interface RealtimeServerOptions {
  /** Names the test database and data directory. */
  readonly label: string;
  /** Canvas of the model configuration (small keeps rendering cheap). */
  readonly canvas?: { readonly width: number; readonly height: number };
  readonly variant?: string;
  readonly endpoint?: Parameters<typeof mountRealtime>[1];
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
  const ts = await startTestServer({ label: options.label, plugins: [facePlugin] });
  const rooms = options.rooms ? mountRooms(ts.server) : undefined;
  const endpoint = mountRealtime(ts.server, rooms ? { publishAvatar: rooms.publishAvatar, ...options.endpoint } : options.endpoint);
  const stop = async () => {
    await endpoint.close();
    await rooms?.close();
    await ts.stop();
  };
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
