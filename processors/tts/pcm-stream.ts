/**
 * Raw PCM from a provider's byte stream, at the rate the pipeline asked for: what every TTS plugin
 * that receives little-endian int16 bytes needs (HTTP bodies and WebSocket frames split samples
 * anywhere), in one place. A byte left over at the end of a chunk is carried to the next one;
 * audio at another rate than the requested one is resampled (a service must yield audio at the
 * request's `sampleRate`: the TTS contract).
 */
import { Resampler } from '../../core/audio.ts';

export class PcmStream {
  private carry: Uint8Array | undefined;
  private readonly resampler: Resampler | undefined;

  constructor(readonly sourceRate: number, readonly targetRate: number) {
    this.resampler = sourceRate === targetRate ? undefined : new Resampler(sourceRate, targetRate);
  }

  /** Samples at `targetRate` for these bytes (possibly none yet). */
  push(bytes: Uint8Array): Int16Array {
    let all = bytes;
    if (this.carry) {
      all = new Uint8Array(this.carry.length + bytes.length);
      all.set(this.carry);
      all.set(bytes, this.carry.length);
      this.carry = undefined;
    }
    const even = all.length & ~1;
    if (even < all.length) this.carry = all.slice(even);
    // Copied into a fresh, aligned buffer; PCM is little-endian, as is every host Node runs on.
    const samples = new Int16Array(even / 2);
    new Uint8Array(samples.buffer).set(all.subarray(0, even));
    return this.resampler ? this.resampler.process(samples) : samples;
  }

  /** What the resampler still holds, at the end of the stream. */
  flush(): Int16Array {
    return this.resampler ? this.resampler.flush() : new Int16Array(0);
  }
}
