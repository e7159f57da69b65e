/**
 * Where an output transport writes what the user will hear and see: a WebRTC track, a
 * WebSocket, a file, or memory in tests. Small contract, shared by every output.
 */
import type { ImagePayload } from '../core/frames.ts';

export interface MediaSink {
  /** Writes one chunk of audio that starts playing at `ptsMs` (output clock). */
  writeAudio(pcm: Int16Array, sampleRate: number, ptsMs: number): void;
  /** Writes one video image shown from `ptsMs`. Optional: audio-only outputs ignore images. */
  writeImage?(image: ImagePayload, ptsMs: number): void;
  /** Drops anything buffered downstream of us (barge-in). */
  clear?(): void;
  /**
   * Sends a message to the session's client (transcripts, client-delivered tool calls): the
   * widget turns `{type: 'tool-call', ...}` into its `svcToolCall` window event.
   */
  sendMessage?(message: Readonly<Record<string, unknown>>): void;
}

/** Keeps everything written, with times: for tests and offline rendering. */
export class MemoryMediaSink implements MediaSink {
  readonly audio: Array<{ pcm: Int16Array; sampleRate: number; ptsMs: number }> = [];
  readonly images: Array<{ image: ImagePayload; ptsMs: number }> = [];
  readonly messages: Array<Readonly<Record<string, unknown>>> = [];
  clears = 0;

  writeAudio(pcm: Int16Array, sampleRate: number, ptsMs: number): void {
    this.audio.push({ pcm, sampleRate, ptsMs });
  }

  writeImage(image: ImagePayload, ptsMs: number): void {
    this.images.push({ image, ptsMs });
  }

  clear(): void {
    this.clears++;
  }

  sendMessage(message: Readonly<Record<string, unknown>>): void {
    this.messages.push(message);
  }

  /** Milliseconds of audio written. */
  get audioMs(): number {
    return this.audio.reduce((ms, a) => ms + (a.pcm.length / a.sampleRate) * 1000, 0);
  }
}
