/**
 * `startLiveKitServerFake`: the fake LiveKit server (livekit-server.ts) in a child process
 * (livekit-server-host.ts), as a LiveKit server is a process of its own. Its media plane forwards
 * packets on its event loop (werift); in the test process it would share that loop with the bots,
 * SDKs and servers the test runs, and under load each slowed the other (chromium then played the
 * bot's audio with a 2 s jitter buffer: docs/webrtc.md).
 *
 * The returned object is the same `LiveKitServerFake` a test would have in process, mirrored: what
 * the fake records (participants, their tracks, requests, media counters, data packets, ...)
 * arrives every `MIRROR_INTERVAL_MS` and is applied in place (the objects a test holds stay the
 * ones that change), and a method's promise resolves after the state it changed has arrived. The
 * child ends when `close()` is called or this process goes away (its IPC channel closes), however
 * it goes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type { FakeParticipant, FakePublishedTrack, FakeReceivedMedia, LiveKitServerFake, LiveKitServerFakeOptions } from './livekit-server.ts';

/** How often the child sends what changed (a test's `until` polls see the fake at most this late). */
export const MIRROR_INTERVAL_MS = 20;

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** A participant's lists and the fake's own: they only grow, so only what is new is sent. */
export const PARTICIPANT_LISTS = ['requests', 'negotiations', 'refusals', 'forwarded', 'dataSent', 'dropped'] as const;
export const FAKE_LISTS = ['refusedUpgrades', 'validations', 'roomApiRequests', 'droppedWhileCut', 'resumesRefused'] as const;

interface ListDelta {
  readonly from: number;
  readonly items: unknown[];
}

export interface ParticipantDelta {
  readonly sid: string;
  /** The whole participant, the first time it is sent. */
  readonly initial?: FakeParticipant;
  /** What can change in place, when it did. */
  readonly part?: {
    state: FakeParticipant['state'];
    leftBy: FakeParticipant['leftBy'] | null;
    publisherState: string;
    subscriberState: string;
    media: FakeReceivedMedia;
    tracks: FakePublishedTrack[];
  };
  readonly lists: Partial<Record<(typeof PARTICIPANT_LISTS)[number], ListDelta>>;
}

export interface FakeStateDelta {
  readonly participants: ParticipantDelta[];
  readonly lists: Partial<Record<(typeof FAKE_LISTS)[number], ListDelta>>;
  readonly createdRooms?: Array<[string, { name: string; emptyTimeout: number; maxParticipants: number }]>;
}

export type FakeCall =
  | { readonly id: number; readonly method: 'deleteRoom' | 'cutOff' | 'restore' | 'dropSignal' | 'inboundStats'; readonly args: [string] };

export type FakeHostMessage =
  | { readonly type: 'ready'; readonly url: string; readonly apiKey: string; readonly apiSecret: string }
  | { readonly type: 'state'; readonly delta: FakeStateDelta }
  | { readonly type: 'reply'; readonly id: number; readonly result?: unknown; readonly error?: string };

const HOST = new URL('./livekit-server-host.ts', import.meta.url).pathname;

export async function startLiveKitServerFake(options: LiveKitServerFakeOptions = {}): Promise<LiveKitServerFake> {
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', HOST, JSON.stringify(options)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const participants: FakeParticipant[] = [];
  const bySid = new Map<string, FakeParticipant>();
  const top = { refusedUpgrades: [] as LiveKitServerFake['refusedUpgrades'][number][], validations: [] as number[], roomApiRequests: [] as string[], droppedWhileCut: [] as string[], resumesRefused: [] as string[] };
  const createdRooms: LiveKitServerFake['createdRooms'] = new Map();
  const pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  let nextId = 0;
  let exited = false;
  const exit = new Promise<void>((resolve) => child.once('exit', () => {
    exited = true;
    for (const p of pending.values()) p.reject(new Error('the fake LiveKit server process exited'));
    pending.clear();
    resolve();
  }));

  const append = (list: unknown[], d: ListDelta | undefined) => {
    if (d) list.splice(d.from, list.length - d.from, ...d.items);
  };

  function apply(delta: FakeStateDelta): void {
    for (const d of delta.participants) {
      if (d.initial) {
        bySid.set(d.sid, d.initial);
        participants.push(d.initial);
        continue;
      }
      const p = bySid.get(d.sid) as Mutable<FakeParticipant> | undefined;
      if (!p) continue; // never: a participant's first delta carries it whole
      if (d.part) {
        p.state = d.part.state;
        if (d.part.leftBy) p.leftBy = d.part.leftBy;
        p.publisherState = d.part.publisherState;
        p.subscriberState = d.part.subscriberState;
        Object.assign(p.media, d.part.media);
        for (const t of d.part.tracks) {
          const known = p.tracks.find((k) => k.sid === t.sid);
          if (known) Object.assign(known, t);
          else p.tracks.push({ ...t });
        }
      }
      for (const key of PARTICIPANT_LISTS) append(p[key], d.lists[key]);
    }
    for (const key of FAKE_LISTS) append(top[key], delta.lists[key]);
    if (delta.createdRooms) {
      createdRooms.clear();
      for (const [name, room] of delta.createdRooms) createdRooms.set(name, room);
    }
  }

  const ready = new Promise<{ url: string; apiKey: string; apiSecret: string }>((resolve, reject) => {
    // A failed spawn, or a send or disconnect on a channel that just closed, is an 'error' event:
    // unheard, it would end the test process instead of failing what waited on the fake.
    child.on('error', (error) => {
      reject(error);
      for (const p of pending.values()) p.reject(error);
      pending.clear();
    });
    child.on('message', (message: FakeHostMessage) => {
      if (message.type === 'ready') resolve(message);
      else if (message.type === 'state') apply(message.delta);
      else {
        const call = pending.get(message.id);
        pending.delete(message.id);
        if (message.error !== undefined) call?.reject(new Error(message.error));
        else call?.resolve(message.result);
      }
    });
    void exit.then(() => reject(new Error('the fake LiveKit server process exited before it listened')));
  });
  const { url, apiKey, apiSecret } = await ready;

  function call<T>(method: FakeCall['method'], arg: string): Promise<T> {
    if (exited || !child.connected) return Promise.reject(new Error('the fake LiveKit server process has exited'));
    const id = ++nextId;
    return new Promise<T>((resolve, reject) => {
      pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      child.send({ id, method, args: [arg] } satisfies FakeCall, (error) => {
        if (!error) return;
        pending.delete(id);
        reject(error);
      });
    });
  }

  return {
    url,
    pid: child.pid!,
    apiKey,
    apiSecret,
    participants,
    ...top,
    createdRooms,
    inRoom: (room) => participants.filter((p) => p.room === room && p.state !== 'disconnected'),
    deleteRoom: (room) => call<number>('deleteRoom', room),
    cutOff: (identity) => call<number>('cutOff', identity),
    restore: (identity) => call<void>('restore', identity),
    dropSignal: (identity) => call<number>('dropSignal', identity),
    inboundStats: (sid) => call<Array<Record<string, unknown>>>('inboundStats', sid),
    async close() {
      if (!exited && child.connected) child.disconnect();
      const killer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exit;
      clearTimeout(killer);
    },
  };
}
