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
  // How the session ends: asked (end/close), said by the server (session_ended), or lost.
  let asked = false;
  let endedByServer = false;
  let fault: string | null = null;
  client.messages$.subscribe({
    next: (m) => {
      if (m.type === 'session_ended') endedByServer = true;
      if (m.type === 'error' && m.fatal) fault ??= `${m.code}: ${m.message}`;
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
      // A lost face is an error of the frame stream (the avatar processor then reports
      // face_failed), not a normal end: the pipeline must not go on without its face.
      if (asked || endedByServer) frames.complete();
      else frames.error(new Error(`the remote face session was lost (${fault ?? 'the connection closed'})`));
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
      // After the session ended, audio goes nowhere, as with a face in this process.
      if (!client.isConnected) return;
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
      asked = true;
      client.end();
      await endedPromise;
    },
    close: () => {
      asked = true;
      client.close();
    },
  };
}
