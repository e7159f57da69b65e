/**
 * What the test pages run: join a room with the served client script, show the stream in a
 * <video> element, and read the receiver's own numbers from getStats (decoded frames and size,
 * audio samples and level). Runs inside chromium; passed to page.evaluate as functions.
 */
import type { Page } from 'playwright-core';
import { holdsWithin } from '../../testing/until.ts';

export interface ReceiverStats {
  readonly framesDecoded: number;
  readonly frameWidth: number;
  readonly frameHeight: number;
  readonly totalSamplesReceived: number;
  readonly audioLevel: number;
  readonly totalAudioEnergy: number;
  readonly connectionState: string;
  readonly tracks: readonly { readonly kind: string; readonly readyState: string }[];
  readonly events: readonly string[];
}

export async function joinRoom(
  page: Page,
  options: { url: string; room?: string; token: string; microphone?: boolean },
): Promise<{ ok: true; participantId: string } | { ok: false; code: string; fatal: boolean }> {
  return page.evaluate(async ({ microphone, ...rest }) => {
    const w = window as unknown as Record<string, any>;
    const opts = microphone ? { ...rest, microphone: (await navigator.mediaDevices.getUserMedia({ audio: true })).getAudioTracks()[0] } : rest;
    w.__events = [] as string[];
    w.__tracks = [] as MediaStreamTrack[];
    try {
      const room = await w.SvcRoom.join(opts);
      w.__room = room;
      room.on('track', ({ track, stream }: { track: MediaStreamTrack; stream: MediaStream }) => {
        w.__tracks.push(track);
        w.__events.push(`track:${track.kind}`);
        const video = document.getElementById('avatar') as HTMLVideoElement;
        if (video.srcObject !== stream) video.srcObject = stream;
        void video.play().catch(() => undefined);
      });
      for (const name of ['unpublished', 'closed', 'connected', 'trackended', 'disconnected']) room.on(name, () => w.__events.push(name));
      room.on('error', (e: { code: string; fatal: boolean }) => w.__events.push(`error:${e.code}:${e.fatal}`));
      room.on('message', (m: { type: string }) => w.__events.push(`message:${m.type}`));
      return { ok: true as const, participantId: room.participantId as string };
    } catch (error) {
      const e = error as { code: string; fatal: boolean };
      return { ok: false as const, code: e.code, fatal: e.fatal };
    }
  }, options);
}

export async function receiverStats(page: Page): Promise<ReceiverStats> {
  return page.evaluate(async () => {
    const w = window as unknown as Record<string, any>;
    const room = w.__room;
    const out = { framesDecoded: 0, frameWidth: 0, frameHeight: 0, totalSamplesReceived: 0, audioLevel: 0, totalAudioEnergy: 0, connectionState: 'none' };
    const pc: RTCPeerConnection | null = room?.peerConnection ?? null;
    if (pc) {
      out.connectionState = pc.connectionState;
      const report = await pc.getStats();
      report.forEach((s: any) => {
        if (s.type !== 'inbound-rtp') return;
        if (s.kind === 'video') {
          out.framesDecoded = s.framesDecoded ?? 0;
          out.frameWidth = s.frameWidth ?? 0;
          out.frameHeight = s.frameHeight ?? 0;
        } else if (s.kind === 'audio') {
          out.totalSamplesReceived = s.totalSamplesReceived ?? 0;
          out.audioLevel = s.audioLevel ?? 0;
          out.totalAudioEnergy = s.totalAudioEnergy ?? 0;
        }
      });
    }
    return {
      ...out,
      tracks: ((w.__tracks ?? []) as MediaStreamTrack[]).map((t) => ({ kind: t.kind, readyState: t.readyState })),
      events: [...((w.__events ?? []) as string[])],
    };
  });
}

/** Polls until `done` holds (returns the stats) or `withinMs` passes (returns the last stats). */
export async function waitForStats(page: Page, done: (s: ReceiverStats) => boolean, withinMs = 30_000): Promise<ReceiverStats> {
  let stats!: ReceiverStats;
  await holdsWithin(async () => done((stats = await receiverStats(page))), { timeoutMs: withinMs, intervalMs: 100 });
  return stats;
}
