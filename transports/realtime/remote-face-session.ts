/**
 * A FaceSession served by a remote /realtime endpoint: the avatar processor in "remote" mode.
 * Frames arrive from the server already paced at 25 fps; this adapter only translates them.
 */
import { Subject, type Observable } from 'rxjs';
import type { Clock } from '../../core/clock.ts';
import type { FaceFrame, FaceSession, FaceTurnOptions } from '../../processors/avatar/face-model.ts';
import { SvcClient, type SvcClientOptions } from './svc-client.ts';

export async function openRemoteFaceSession(options: SvcClientOptions, clock: Clock): Promise<FaceSession> {
  const client = new SvcClient(options);
  const frames = new Subject<FaceFrame>();
  let ended: (() => void) | undefined;
  const endedPromise = new Promise<void>((resolve) => (ended = resolve));
  let speechQueued = false;
  client.messages$.subscribe({
    next: (m) => {
      if (m.type !== 'frame') return;
      const f = m.frame;
      if (f.final) speechQueued = false;
      frames.next({
        index: f.index,
        ptsMs: f.ptsMs,
        type: f.type,
        final: f.final,
        turnId: f.turnId,
        image: { width: f.width, height: f.height, format: f.imageFormat, data: f.image ?? new Uint8Array(0) },
        audio: f.audio,
      });
    },
    complete: () => {
      frames.complete();
      ended?.();
    },
  });
  const ready = await client.connect();
  return {
    frames: frames.asObservable() as Observable<FaceFrame>,
    width: ready.width,
    height: ready.height,
    imageFormat: ready.video.format,
    startedAtMs: clock.now(),
    startTurn: () => void client.startTurn(),
    pushAudio: (pcm: Int16Array, _turn?: FaceTurnOptions) => {
      speechQueued = true;
      client.sendAudio(pcm);
    },
    endTurn: () => void client.endTurn(),
    cancel: () => {
      const had = speechQueued;
      speechQueued = false;
      client.cancel();
      return had;
    },
    end: async () => {
      client.end();
      await endedPromise;
    },
    close: () => client.close(),
  };
}
