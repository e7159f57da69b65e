/**
 * The input side of an embedded room: a processor, placed first in a pipeline, that turns a
 * subscriber's microphone (`Room.participantAudio`: 10 ms chunks, 16 kHz mono with @roamhq/wrtc)
 * into `input-audio` frames at the pipeline's input rate (the start frame's
 * `audioInSampleRate`; resampled with core/audio.ts when the rates differ), in chunks of
 * `chunkMs`. It listens to one participant: the one named in the options, or else the first
 * one whose audio arrives, until that one leaves (a visitor who reconnects comes back with a
 * new participant id and is followed again). Audio from anyone else is dropped and counted.
 *
 * It also passes on who is in the room (`presence`), so whoever runs the bot knows when the
 * visitor joins, connects and leaves. Pairs with `publishAvatar` (the output side).
 */
import { resolveOptions } from '../../core/options.ts';
import type { Observable, Subscription } from 'rxjs';
import { AudioChunker, StreamResampler, toMono } from '../../core/audio.ts';
import { frame, type Direction, type Frame } from '../../core/frames.ts';
import { FrameProcessor, type ProcessorOptions } from '../../core/processor.ts';
import { WORKER_DEFAULTS } from '../../core/worker.ts';
import type { ParticipantAudio, RoomSubscriberEvent } from './room.ts';

export const ROOM_AUDIO_INPUT_DEFAULTS = {
  /** Size of each `input-audio` frame (wrtc delivers 10 ms: passed on as they come, so the VAD hears the end of speech without waiting for a second chunk). */
  chunkMs: 10,
} as const;

/** What the input needs from a room (an embedded `Room` has both). */
export interface RoomAudioSource {
  readonly participantAudio: Observable<ParticipantAudio>;
  readonly subscriberEvents: Observable<RoomSubscriberEvent>;
}

export interface RoomAudioInputOptions extends ProcessorOptions {
  /** Listen only to this participant; default: the first one heard, until it leaves. */
  readonly participantId?: string;
  /** Rate of the frames; default the start frame's `audioInSampleRate` (before the start frame, `WORKER_DEFAULTS.audioInSampleRate`). */
  readonly sampleRate?: number;
  readonly chunkMs?: number;
}

export interface RoomAudioInputStats {
  /** `input-audio` frames pushed. */
  frames: number;
  /** 10 ms chunks dropped because they came from another participant than the one followed. */
  otherParticipantChunks: number;
}

export class RoomAudioInput extends FrameProcessor {
  private readonly fixedParticipant: string | undefined;
  private followed: string | null;
  private readonly chunkMs: number;
  private subscription: Subscription | undefined;
  private readonly resampling = new StreamResampler(() => this.sampleRate);
  private chunker: AudioChunker | undefined;
  readonly stats: RoomAudioInputStats = { frames: 0, otherParticipantChunks: 0 };

  constructor(
    private readonly room: RoomAudioSource,
    private readonly options: RoomAudioInputOptions = {},
  ) {
    super(options);
    this.fixedParticipant = options.participantId;
    this.followed = options.participantId ?? null;
    this.chunkMs = resolveOptions(ROOM_AUDIO_INPUT_DEFAULTS, { chunkMs: options.chunkMs }).chunkMs;
  }

  /** Who is in the room (joins, peer connection states, departures); hot, from the room. */
  get presence(): Observable<RoomSubscriberEvent> {
    return this.room.subscriberEvents;
  }

  /** The participant whose microphone feeds the pipeline now (null: waiting for the first). */
  get participantId(): string | null {
    return this.followed;
  }

  get sampleRate(): number {
    return this.options.sampleRate ?? this.startFrame?.audioInSampleRate ?? WORKER_DEFAULTS.audioInSampleRate;
  }

  protected override process(f: Frame, direction: Direction): void {
    if (direction === 'downstream') {
      switch (f.type) {
        case 'start':
          this.push(f, direction);
          this.listen();
          return;
        case 'end':
        case 'cancel':
          this.stop();
          break;
        default:
          break;
      }
    }
    this.push(f, direction);
  }

  private listen(): void {
    if (this.subscription) return;
    this.subscription = this.room.participantAudio.subscribe((audio) => {
      // A throw here would surface as an unhandled rxjs error; a bad chunk is reported and dropped.
      try {
        this.onAudio(audio);
      } catch (error) {
        this.pushError(`room audio dropped: ${error instanceof Error ? error.message : String(error)}`, { code: 'input_audio_failed' });
      }
    });
    this.subscription.add(
      this.room.subscriberEvents.subscribe((event) => {
        if (event.type === 'left' && event.participantId === this.followed && this.fixedParticipant === undefined) {
          this.followed = null; // the next one heard is followed
          this.resampling.reset();
          this.chunker = undefined;
        }
      }),
    );
  }

  private onAudio(audio: ParticipantAudio): void {
    if (this.followed === null) this.followed = audio.participantId;
    if (audio.participantId !== this.followed) {
      this.stats.otherParticipantChunks++;
      return;
    }
    // The chunker copies what it is given, so wrtc reusing its buffer for the next chunk is harmless.
    const rate = this.sampleRate;
    const pcm = this.resampling.convert(toMono(audio.samples, audio.channels), audio.sampleRate);
    this.chunker ??= new AudioChunker(rate, this.chunkMs);
    for (const chunk of this.chunker.push(pcm)) {
      this.stats.frames++;
      this.push(frame('input-audio', { pcm: chunk, sampleRate: rate, channels: 1 }));
    }
  }

  private stop(): void {
    this.subscription?.unsubscribe();
    this.subscription = undefined;
  }

  override cleanup(): void {
    this.stop();
    super.cleanup();
  }
}
