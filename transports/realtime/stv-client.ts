/**
 * SvcSTVClient: the high-level speech-to-video client. Give it TTS audio at any sample rate; it
 * sends a 16 kHz copy to the server, keeps the original, and plays both back on a 25 fps clock:
 * each tick yields the original audio that belongs to the avatar frame shown with it (matched
 * against the frame's own audio, see turn-audio.ts). A small jitter buffer absorbs network
 * unevenness; after a barge-in (`interrupt()`), queued speech is dropped here, speech frames
 * still in flight from the server are discarded until it confirms the cancel, and the clock
 * re-syncs to the frames that follow.
 */
import { RealClock, type Clock, type TimerHandle } from '../../core/clock.ts';
import { concat, Resampler, toMono } from '../../core/audio.ts';
import { FACE_TIMING } from '../../processors/avatar/face-model.ts';
import { loadSharp } from '../load-sharp.ts';
import { AsyncQueue } from './async-queue.ts';
import { SvcClient, type SvcClientOptions } from './svc-client.ts';
import { LocalTurn } from './turn-audio.ts';
import type { FrameOutMessage, RealtimeFrameType, SessionReadyMessage } from '../../protocol/realtime.ts';
import { resolveOptions } from '../../core/options.ts';

export const STV_DEFAULTS = {
  /** Frames buffered before playback starts (and after an underrun): 2 = 80 ms. */
  jitterBufferFrames: 2,
  /** Above this many buffered frames (1 s), idle frames are dropped to catch up with real time. */
  maxBufferedFrames: FACE_TIMING.framesPerSecond,
  /**
   * While playing, an idle frame that arrives with this many frames beyond the jitter buffer
   * already queued is dropped: after a stall, the latency it added drains back one frame per
   * tick during the next silence (speech is never dropped). 2 frames absorb ordinary network
   * unevenness without dropping anything.
   */
  drainSlackFrames: 2,
  /** The playback tick: one face frame. */
  frameMs: FACE_TIMING.frameDurationMs,
  /**
   * A cancel not confirmed (`turn_cancelled`) within this long (ms) was lost (the server drops
   * control messages past its rate limit): speech frames are played again instead of muted for good.
   */
  cancelConfirmMs: 2_000,
  /**
   * Ticks of output (each one audio frame and, with a picture, one video frame) a consumer of
   * `outputStream()` may leave unread: 50 = 2 s. Past it the oldest tick is dropped (counted in
   * `outputDropped`), so a consumer slower than real time, or one that stopped reading, falls at
   * most this far behind instead of holding every frame (a 640x360 picture is 691 KB: 17 MB a
   * second).
   */
  maxOutputFrames: 50,
} as const;

export type STVEventName =
  | 'SESSION_READY'
  | 'FIRST_FRAME'
  | 'WEBRTC_CONNECTED'
  | 'BOT_STARTED_SPEAKING'
  | 'BOT_STOPPED_SPEAKING'
  | 'INTERRUPTED'
  | 'ERROR'
  | 'CLOSED';

export interface STVAudioFrame {
  readonly kind: 'audio';
  readonly pcm: Int16Array;
  readonly sampleRate: number;
  readonly ptsMs: number;
  readonly frameIndex: number;
}

export interface STVVideoFrame {
  readonly kind: 'video';
  /** width * height * 3 bytes. */
  readonly rgb: Uint8Array;
  readonly width: number;
  readonly height: number;
  readonly ptsMs: number;
  readonly frameIndex: number;
  readonly frameType: RealtimeFrameType;
}

export type STVOutput = STVAudioFrame | STVVideoFrame;
export type STVHandler = (payload: Record<string, unknown>) => unknown;

export interface SvcSTVClientOptions extends SvcClientOptions {
  readonly clock?: Clock;
  readonly jitterBufferFrames?: number;
  readonly maxBufferedFrames?: number;
  /** See STV_DEFAULTS.drainSlackFrames (>= 0). */
  readonly drainSlackFrames?: number;
  /** See STV_DEFAULTS.maxOutputFrames (>= 1). */
  readonly maxOutputFrames?: number;
  /** Sample rate of yielded audio; default: the rate of the first TTS audio received. */
  readonly outputSampleRate?: number;
  /** Where failing event handlers are reported (default console.error). */
  readonly onHandlerError?: (event: STVEventName, err: unknown) => void;
}

interface Buffered {
  readonly frame: FrameOutMessage;
  readonly rgb: Promise<Uint8Array | undefined>;
  /** Original-rate audio of this frame (silence unless it is speech). */
  readonly pcm: Int16Array;
  /** The rate of `pcm`: frames buffered before the first TTS audio carry 16 kHz silence. */
  readonly rate: number;
}

const isSpeech = (f: FrameOutMessage) => f.type === 'speech' || f.type === 'speech-start';
const EMPTY: Int16Array = new Int16Array(0);
const join = (a: Int16Array, b: Int16Array): Int16Array => (a.length === 0 ? b : concat([a, b]));

export class SvcSTVClient {
  readonly client: SvcClient;
  private readonly clock: Clock;
  private readonly handlers = new Map<STVEventName, Set<STVHandler>>();
  /** One entry per tick: its audio frame, then its video frame when it has a picture. */
  private readonly output: AsyncQueue<readonly STVOutput[]>;
  private buffer: Buffered[] = [];
  /** Utterances sent and not yet finished playing, oldest first. */
  private turns: LocalTurn[] = [];
  /** Cancels sent and not yet confirmed: speech frames arriving meanwhile belong to cancelled turns. */
  private unconfirmedCancels = 0;
  /** When the last cancel went out: one unconfirmed for `STV_DEFAULTS.cancelConfirmMs` was lost (dropped by a rate limit). */
  private lastCancelAt = 0;
  /** Bumped by interrupt(): frames already handed to the output chain before it play silent. */
  private epoch = 0;
  private outputRate: number | undefined;
  private toServer: Resampler | undefined;
  private toOutput: Resampler | undefined;
  private tick: TimerHandle | undefined;
  private nextTickAt = 0;
  private playing = false;
  private turnOpen = false;
  private firstFrameSent = false;
  private speaking = false;
  private closed = false;
  private emitChain: Promise<void> = Promise.resolve();
  /** Ticks where no frame had arrived in time (diagnostics). */
  underruns = 0;
  /** Frames dropped to catch up with real time (diagnostics). */
  dropped = 0;

  /** Ticks of output dropped because the consumer left more than `maxOutputFrames` unread (diagnostics). */
  get outputDropped(): number {
    return this.output.dropped;
  }

  /** Ticks of output waiting for the consumer of `outputStream()` (at most `maxOutputFrames`). */
  get outputQueuedFrames(): number {
    return this.output.size;
  }

  /** The playback settings: STV_DEFAULTS with the options over them. */
  private readonly settings: { jitterBufferFrames: number; maxBufferedFrames: number; drainSlackFrames: number };

  constructor(private readonly options: SvcSTVClientOptions) {
    const { jitterBufferFrames, maxBufferedFrames, drainSlackFrames, maxOutputFrames } = resolveOptions(STV_DEFAULTS, {
      jitterBufferFrames: options.jitterBufferFrames,
      maxBufferedFrames: options.maxBufferedFrames,
      drainSlackFrames: options.drainSlackFrames,
      maxOutputFrames: options.maxOutputFrames,
    });
    if (!Number.isInteger(maxOutputFrames) || maxOutputFrames < 1) throw new RangeError(`maxOutputFrames must be an integer >= 1, got ${maxOutputFrames}`);
    this.settings = { jitterBufferFrames, maxBufferedFrames, drainSlackFrames };
    this.output = new AsyncQueue<readonly STVOutput[]>(maxOutputFrames);
    this.client = new SvcClient(options);
    this.clock = options.clock ?? new RealClock();
    this.outputRate = options.outputSampleRate;
    const slack = options.drainSlackFrames;
    if (slack !== undefined && !(Number.isInteger(slack) && slack >= 0)) throw new RangeError(`drainSlackFrames must be an integer >= 0, got ${slack}`);
  }

  /** Frames received and not yet played: the playback latency, in 40 ms frames. */
  get bufferedFrames(): number {
    return this.buffer.length;
  }

  get isConnected(): boolean {
    return this.client.isConnected;
  }

  /** Registers a handler (sync or async); returns a function that removes it. */
  on(event: STVEventName, handler: STVHandler): () => void {
    let set = this.handlers.get(event);
    if (!set) this.handlers.set(event, (set = new Set()));
    set.add(handler);
    return () => set!.delete(handler);
  }

  addListener(event: STVEventName, handler: STVHandler): () => void {
    return this.on(event, handler);
  }

  async connect(): Promise<SessionReadyMessage> {
    this.client.messages$.subscribe({
      next: (m) => {
        switch (m.type) {
          case 'frame':
            this.receive(m.frame);
            break;
          case 'turn_cancelled':
            this.unconfirmedCancels = Math.max(0, this.unconfirmedCancels - 1);
            this.emit('INTERRUPTED', { turn_id: m.turn_id, had_speech: m.had_speech });
            break;
          case 'webrtc_connected':
            this.emit('WEBRTC_CONNECTED', { participant_id: m.participant_id, room: m.room });
            break;
          case 'error':
            this.emit('ERROR', { message: m.message, code: m.code, fatal: m.fatal });
            break;
          default:
            break;
        }
      },
      complete: () => this.shutdown(),
    });
    const ready = await this.client.connect();
    this.emit('SESSION_READY', { ...ready });
    return ready;
  }

  /** Starts an utterance; call once per utterance before `sendTtsAudio`. */
  startTurn(): void {
    this.endTurn();
    this.turnOpen = true;
    this.turns.push(new LocalTurn());
    this.client.startTurn();
  }

  /** Queues TTS audio (any rate, mono or interleaved multi-channel int16). */
  sendTtsAudio(pcm: Int16Array, sampleRate: number, channels = 1): void {
    const mono = toMono(pcm, channels);
    this.outputRate ??= sampleRate;
    if (!this.turnOpen) this.startTurn();
    const turn = this.turns.at(-1)!;
    // The rate changed mid-utterance: the previous resamplers' tails come first, so no sample is lost.
    let serverTail: Int16Array = EMPTY;
    let localTail: Int16Array = EMPTY;
    if (this.toServer && this.toServer.fromRate !== sampleRate) {
      serverTail = this.toServer.flush();
      this.toServer = undefined;
    }
    if (this.toOutput && this.toOutput.fromRate !== sampleRate) {
      localTail = this.toOutput.flush();
      this.toOutput = undefined;
    }
    this.toServer ??= new Resampler(sampleRate, FACE_TIMING.audioSampleRate);
    const toServer = join(serverTail, this.toServer.process(mono));
    turn.sent.push(toServer);
    // A resampler may hold everything back until more audio comes: nothing to send then.
    if (toServer.length > 0) this.client.sendAudio(toServer);
    let local = mono;
    if (sampleRate !== this.outputRate) {
      this.toOutput ??= new Resampler(sampleRate, this.outputRate);
      local = this.toOutput.process(mono);
    }
    turn.original.push(join(localTail, local));
  }

  endTurn(): void {
    if (!this.turnOpen) return;
    this.turnOpen = false;
    const turn = this.turns.at(-1)!;
    const tail = this.toServer?.flush() ?? new Int16Array(0);
    turn.sent.push(tail);
    // The output copy's resampler holds the last few samples back too.
    if (this.toOutput) turn.original.push(this.toOutput.flush());
    turn.ended = true;
    // An utterance without audio never shows on the server: nothing will ever play it.
    if (!turn.hasAudio) this.turns.pop();
    this.client.sendAudio(tail, true);
    this.toServer = undefined;
    this.toOutput = undefined;
  }

  /** One-shot: a whole utterance. */
  say(pcm: Int16Array, sampleRate: number, channels = 1): void {
    this.startTurn();
    this.sendTtsAudio(pcm, sampleRate, channels);
    this.endTurn();
  }

  /**
   * Barge-in: drops queued speech here and asks the server to cancel. Returns whether a
   * server-side cancel was actually sent (false when nothing was speaking or queued).
   */
  interrupt(): boolean {
    const active = this.turnOpen || this.turns.length > 0 || this.buffer.some((b) => isSpeech(b.frame)) || this.speaking;
    if (!active) return false;
    this.epoch++;
    this.buffer = this.buffer.filter((b) => !isSpeech(b.frame));
    this.turns = [];
    this.turnOpen = false;
    this.toServer = undefined;
    this.toOutput = undefined;
    if (this.speaking) {
      this.speaking = false;
      this.emit('BOT_STOPPED_SPEAKING', { interrupted: true });
    }
    const sent = this.client.cancel();
    if (sent) {
      this.unconfirmedCancels++;
      this.lastCancelAt = this.clock.now();
    }
    return sent;
  }

  /**
   * Synchronized audio and video, one pair per 40 ms tick, until the session closes. Read it in
   * real time: at most `maxOutputFrames` ticks wait for a consumer (older ones are dropped).
   */
  outputStream(): AsyncIterable<STVOutput> {
    const ticks = this.output;
    return {
      [Symbol.asyncIterator](): AsyncIterator<STVOutput> {
        const queue = ticks[Symbol.asyncIterator]();
        let tick: STVOutput[] = [];
        return {
          async next() {
            while (tick.length === 0) {
              const r = await queue.next();
              if (r.done) return { value: undefined, done: true };
              tick = [...r.value];
            }
            return { value: tick.shift()!, done: false };
          },
          // At once, also while a next() waits for the next tick (as the queue's own return does).
          return() {
            tick = [];
            return queue.return!().then(() => ({ value: undefined, done: true as const }));
          },
        };
      },
    };
  }

  close(): void {
    this.client.close();
    this.shutdown();
  }

  // ---- internals --------------------------------------------------------------------------------

  private receive(frame: FrameOutMessage): void {
    // A cancel never confirmed (the server dropped it: more than its control messages a second)
    // must not mute every later turn: after a bound it is taken for lost.
    if (this.unconfirmedCancels > 0 && this.clock.now() - this.lastCancelAt > STV_DEFAULTS.cancelConfirmMs) this.unconfirmedCancels = 0;
    if (isSpeech(frame) && this.unconfirmedCancels > 0) return; // speech of a cancelled turn, already in flight
    const { jitterBufferFrames: jitter, drainSlackFrames, maxBufferedFrames: max } = this.settings;
    if (frame.type === 'idle' && this.playing && this.buffer.length >= jitter + drainSlackFrames) {
      this.dropped++; // behind since a stall: skipping silence brings the latency back
      return;
    }
    const rate = this.outputRate ?? FACE_TIMING.audioSampleRate;
    const samplesOut = Math.round((rate * STV_DEFAULTS.frameMs) / 1000);
    const turn = isSpeech(frame) ? this.turnOf(frame.turnId) : undefined;
    const pcm = turn ? turn.audioFor(frame.audio, rate, samplesOut) : new Int16Array(samplesOut);
    if (frame.final && frame.turnId !== null) this.turns = this.turns.filter((t) => t.serverTurnId !== frame.turnId);
    const image = frame.image;
    const rgb = image
      ? frame.imageFormat === 'rgb'
        ? Promise.resolve(image)
        : loadSharp()
            .then((sharp) => sharp(image).removeAlpha().raw().toBuffer())
            .then((b) => new Uint8Array(b.buffer, b.byteOffset, b.byteLength), () => undefined)
      : Promise.resolve(undefined);
    this.buffer.push({ frame, rgb, pcm, rate });
    // Re-sync: far behind real time, idle frames are the ones we can skip without losing speech.
    while (this.buffer.length > max) {
      const idle = this.buffer.findIndex((b) => b.frame.type === 'idle');
      if (idle < 0) break;
      this.buffer.splice(idle, 1);
      this.dropped++;
    }
    if (!this.playing && this.buffer.length >= jitter) this.startPlayback();
  }

  /** The local utterance a server turn id belongs to: utterances with audio map to server turns in order. */
  private turnOf(serverTurnId: number | null): LocalTurn | undefined {
    if (serverTurnId === null) return undefined;
    const known = this.turns.find((t) => t.serverTurnId === serverTurnId);
    if (known) return known;
    const next = this.turns.find((t) => t.serverTurnId === undefined && t.hasAudio);
    if (next) next.serverTurnId = serverTurnId;
    return next;
  }

  private startPlayback(): void {
    this.playing = true;
    this.nextTickAt = this.clock.now();
    this.scheduleTick();
  }

  private scheduleTick(): void {
    if (this.closed) return;
    const delay = Math.max(0, this.nextTickAt - this.clock.now());
    this.tick = this.clock.setTimeout(() => this.onTick(), delay);
  }

  private onTick(): void {
    const next = this.buffer.shift();
    if (!next) {
      // Underrun: stop the clock and wait for the jitter buffer to refill.
      this.underruns++;
      this.playing = false;
      return;
    }
    this.nextTickAt += STV_DEFAULTS.frameMs;
    this.scheduleTick();
    const { frame } = next;
    const epoch = this.epoch;
    // Decoding may take longer than a tick; the chain keeps outputs in tick order regardless.
    this.emitChain = this.emitChain.then(async () => {
      const rgb = await next.rgb;
      if (this.closed) return;
      // interrupt() came after this tick: its speech is silenced and starts nothing.
      const speech = isSpeech(frame) && epoch === this.epoch;
      const pcm = isSpeech(frame) && !speech ? new Int16Array(next.pcm.length) : next.pcm;
      if (!this.firstFrameSent) {
        this.firstFrameSent = true;
        this.emit('FIRST_FRAME', { frame_type: frame.type, frame_index: frame.index });
      }
      if (speech && !this.speaking) {
        this.speaking = true;
        this.emit('BOT_STARTED_SPEAKING', { turn_id: frame.turnId });
      }
      const audio: STVAudioFrame = { kind: 'audio', pcm, sampleRate: next.rate, ptsMs: frame.ptsMs, frameIndex: frame.index };
      this.output.push(rgb ? [audio, { kind: 'video', rgb, width: frame.width, height: frame.height, ptsMs: frame.ptsMs, frameIndex: frame.index, frameType: frame.type }] : [audio]);
      if (frame.final && this.speaking && epoch === this.epoch) {
        this.speaking = false;
        this.emit('BOT_STOPPED_SPEAKING', { turn_id: frame.turnId });
      }
    });
  }

  private emit(event: STVEventName, payload: Record<string, unknown>): void {
    for (const handler of this.handlers.get(event) ?? []) {
      try {
        const r = handler(payload);
        if (r && typeof (r as Promise<unknown>).then === 'function') (r as Promise<unknown>).catch((err) => this.handlerFailed(event, err));
      } catch (err) {
        this.handlerFailed(event, err);
      }
    }
  }

  private handlerFailed(event: STVEventName, err: unknown): void {
    (this.options.onHandlerError ?? ((e, x) => console.error(`SvcSTVClient: ${e} handler failed:`, x)))(event, err);
  }

  private shutdown(): void {
    if (this.closed) return;
    this.closed = true;
    this.clock.clearTimeout(this.tick);
    this.output.close();
    this.emit('CLOSED', {});
  }
}
