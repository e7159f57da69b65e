/**
 * A FaceSession-like frame source for tests: real JPEG pictures made with sharp (a coloured
 * canvas with a bar that moves every frame) and a 440 Hz tone as the frame audio, emitted at
 * 25 fps on the real clock. Same contract as `FaceSession.frames` (index, ptsMs, 640 samples).
 */
import sharp from 'sharp';
import { Observable } from 'rxjs';
import { FACE_TIMING, type FaceFrame } from '../../processors/avatar/face-model.ts';

export interface SyntheticFaceOptions {
  readonly width?: number;
  readonly height?: number;
  /** Distinct pictures rendered up front and cycled. */
  readonly distinctFrames?: number;
  /** Tone amplitude (0..1); 0 gives silent frames. */
  readonly amplitude?: number;
  /** Stop after this many frames (the observable completes). */
  readonly maxFrames?: number;
}

export async function renderSyntheticPictures(width: number, height: number, count: number): Promise<Uint8Array[]> {
  const pictures: Uint8Array[] = [];
  for (let i = 0; i < count; i++) {
    const barX = Math.round(((width - width / 8) * i) / Math.max(1, count - 1));
    const bar = await sharp({ create: { width: Math.max(2, Math.round(width / 8)), height, channels: 3, background: { r: 240, g: 240, b: 40 } } }).png().toBuffer();
    const jpeg = await sharp({ create: { width, height, channels: 3, background: { r: 30, g: 90, b: 200 } } })
      .composite([{ input: bar, left: barX, top: 0 }])
      .jpeg({ quality: 80 })
      .toBuffer();
    pictures.push(new Uint8Array(jpeg));
  }
  return pictures;
}

export function toneFrame(index: number, amplitude: number): Int16Array {
  const n = FACE_TIMING.samplesPerFrame;
  const audio = new Int16Array(n);
  for (let i = 0; i < n; i++) audio[i] = Math.round(amplitude * 32767 * Math.sin((2 * Math.PI * 440 * (index * n + i)) / FACE_TIMING.audioSampleRate));
  return audio;
}

export async function syntheticFaceFrames(options: SyntheticFaceOptions = {}): Promise<Observable<FaceFrame>> {
  const width = options.width ?? 320;
  const height = options.height ?? 240;
  const amplitude = options.amplitude ?? 0.3;
  const pictures = await renderSyntheticPictures(width, height, options.distinctFrames ?? 10);
  return new Observable<FaceFrame>((subscriber) => {
    const start = performance.now();
    let index = 0;
    let timer: ReturnType<typeof setTimeout>;
    const tick = () => {
      if (options.maxFrames !== undefined && index >= options.maxFrames) {
        subscriber.complete();
        return;
      }
      subscriber.next({
        index,
        ptsMs: index * FACE_TIMING.frameDurationMs,
        type: amplitude > 0 ? 'speech' : 'idle',
        final: false,
        turnId: amplitude > 0 ? 1 : null,
        image: { width, height, format: 'jpeg', data: pictures[index % pictures.length]! },
        audio: toneFrame(index, amplitude),
      });
      index++;
      // Frame n is due at start + n * 40 ms, like a FaceSession: timer lateness never accumulates.
      timer = setTimeout(tick, Math.max(0, start + index * FACE_TIMING.frameDurationMs - performance.now()));
    };
    tick();
    return () => clearTimeout(timer);
  });
}
