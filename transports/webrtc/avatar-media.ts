/**
 * Turns face frames into what WebRTC media sources eat: an I420 picture and 10 ms chunks of
 * 48 kHz mono audio. Shared by the embedded room publisher and the LiveKit publisher, so the one
 * conversion both rely on is tested once.
 *
 * A/V stay in step because each face frame is handed on as one unit: its picture together with
 * exactly the 40 ms of audio that belongs to it (four 10 ms chunks once the stream is running).
 */
import { AudioChunker, Resampler } from '../../core/audio.ts';
import type { ImagePayload } from '../../core/frames.ts';
import { FACE_TIMING } from '../../processors/avatar/face-model.ts';
import { loadSharp } from '../load-sharp.ts';
import { wrtc } from './wrtc.ts';

export const AVATAR_MEDIA = {
  /** Sample rate sent to WebRTC (Opus runs at 48 kHz; resampling here keeps it out of libwebrtc). */
  audioSampleRate: 48_000,
  /** RTCAudioSource and LiveKit's AudioSource both take 10 ms per call. */
  audioChunkMs: 10,
} as const;

/** A planar YUV 4:2:0 picture: Y (w*h), then U and V (w/2*h/2 each). Width and height are even. */
export interface I420Frame {
  readonly width: number;
  readonly height: number;
  readonly data: Uint8Array;
}

export function i420ByteLength(width: number, height: number): number {
  return width * height + 2 * ((width >> 1) * (height >> 1));
}

/**
 * Decodes a face frame's image (JPEG, or raw RGB) to I420. Odd dimensions are cropped by one
 * pixel (4:2:0 needs even sizes); the face models only emit even sizes, so this is a safety net.
 */
export async function imageToI420(image: ImagePayload): Promise<I420Frame> {
  if (image.format === 'i420') {
    if (image.data.byteLength !== i420ByteLength(image.width, image.height)) throw new RangeError(`i420 image of ${image.width}x${image.height} needs ${i420ByteLength(image.width, image.height)} bytes, got ${image.data.byteLength}`);
    return { width: image.width, height: image.height, data: image.data };
  }
  if (image.format !== 'jpeg' && image.format !== 'rgb') throw new RangeError(`unsupported image format ${String(image.format)}`);
  const sharp = await loadSharp();
  const input = image.format === 'jpeg' ? sharp(image.data) : sharp(image.data, { raw: { width: image.width, height: image.height, channels: 3 } });
  const { data, info } = await input.ensureAlpha().raw().toBuffer({ resolveWithObject: true });
  return rgbaToI420(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), info.width, info.height);
}

/** RGBA (4 bytes per pixel) to I420 with libyuv (through wrtc), cropping odd sizes to even. */
export function rgbaToI420(rgba: Uint8Array, width: number, height: number): I420Frame {
  if (rgba.byteLength !== width * height * 4) throw new RangeError(`rgba image of ${width}x${height} needs ${width * height * 4} bytes, got ${rgba.byteLength}`);
  const evenWidth = width & ~1;
  const evenHeight = height & ~1;
  if (evenWidth === 0 || evenHeight === 0) throw new RangeError(`image of ${width}x${height} is too small for video`);
  let source = rgba;
  if (evenWidth !== width || evenHeight !== height) {
    source = new Uint8Array(evenWidth * evenHeight * 4);
    for (let y = 0; y < evenHeight; y++) source.set(rgba.subarray(y * width * 4, y * width * 4 + evenWidth * 4), y * evenWidth * 4);
  }
  const data = new Uint8Array(i420ByteLength(evenWidth, evenHeight));
  wrtc().nonstandard.rgbaToI420({ width: evenWidth, height: evenHeight, data: source }, { width: evenWidth, height: evenHeight, data });
  return { width: evenWidth, height: evenHeight, data };
}

/**
 * 16 kHz face-frame audio to 10 ms chunks of 48 kHz. The resampler's first output is short by
 * its filter delay (about 1 ms); that first output is padded with leading silence to whole
 * chunks, so every later 640-sample frame yields exactly four chunks and no audio waits in a
 * remainder behind its picture. Stateful: one per published stream.
 */
export class FrameAudioResampler {
  private readonly resampler: Resampler;
  private readonly chunker: AudioChunker;
  private started = false;

  constructor(
    readonly inputRate: number = FACE_TIMING.audioSampleRate,
    readonly outputRate: number = AVATAR_MEDIA.audioSampleRate,
  ) {
    this.resampler = new Resampler(inputRate, outputRate);
    this.chunker = new AudioChunker(outputRate, AVATAR_MEDIA.audioChunkMs);
  }

  get chunkSamples(): number {
    return this.chunker.chunkSamples;
  }

  push(pcm: Int16Array): Int16Array[] {
    const out = this.resampler.process(pcm);
    if (!this.started && out.length > 0) {
      this.started = true;
      const short = (this.chunkSamples - (out.length % this.chunkSamples)) % this.chunkSamples;
      if (short > 0) this.chunker.push(new Int16Array(short));
    }
    return this.chunker.push(out);
  }

  /** The tail of the stream (filter delay and any remainder), padded to whole chunks. */
  flush(): Int16Array[] {
    const chunks = this.chunker.push(this.resampler.flush());
    const last = this.chunker.flush();
    if (last) chunks.push(last);
    return chunks;
  }
}
