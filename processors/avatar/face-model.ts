/**
 * The vendor-neutral face model contract.
 *
 * A face model turns speech audio into a talking face: the caller opens a session for one
 * configuration (a reference image plus the variant's `model_configurations`), pushes 16 kHz
 * mono int16 speech by turn, and receives frames at exactly 25 fps. Every frame carries one
 * video image and the 40 ms of audio that plays with it (silence when idle), so audio and video
 * can never drift apart downstream. The in-process renderers live in `plugins/face`; the
 * `/realtime` WebSocket and the avatar processor only ever see this interface.
 */
import type { Observable } from 'rxjs';
import type { Clock } from '../../core/clock.ts';
import type { ImagePayload, PhonemeTiming } from '../../core/frames.ts';

/** Fixed timing of every face model: 25 fps, 16 kHz audio, so 640 samples per frame. */
export const FACE_TIMING = {
  framesPerSecond: 25,
  frameDurationMs: 40,
  audioSampleRate: 16_000,
  samplesPerFrame: 640,
} as const;

/**
 * - `idle`: no speech playing (blinks, breathing, micro motion; never a frozen face).
 * - `speech-start`: the first frame of a turn's speech.
 * - `speech`: a frame of a turn's speech (also while a turn waits for more audio).
 * - `fade-out`: the mouth returning to rest after a turn ended or was cancelled; audio is silent.
 */
export type FaceFrameType = 'idle' | 'speech-start' | 'speech' | 'fade-out';

export interface FaceFrame {
  /** 0, 1, 2, ... per session, without gaps. */
  readonly index: number;
  /** Presentation time: `index * 40` ms from the session start. */
  readonly ptsMs: number;
  readonly type: FaceFrameType;
  /** True on the last frame of a turn (its last fade-out frame). */
  readonly final: boolean;
  /** The turn this frame belongs to (1, 2, ...); null on idle frames. */
  readonly turnId: number | null;
  /** `jpeg`, `rgb` (width*height*3 bytes) or `i420` (planar 4:2:0), as chosen by `FaceSessionConfig.imageFormat`. */
  readonly image: ImagePayload;
  /** Exactly 640 samples of 16 kHz mono int16: the audio that plays with this frame. */
  readonly audio: Int16Array;
  /**
   * How many of `audio`'s samples are the turn's own speech (the rest is padding): 640 on a
   * speech frame whose turn had audio queued, fewer on its last short frame, 0 while the turn
   * waits for more audio (an underrun). Absent on sources that do not tell.
   */
  readonly speechSamples?: number;
}

/** Facial landmarks of one reference image: computed once, stored with the asset, reused. */
export interface FaceLandmarks {
  readonly version: 1;
  /** sha256 (hex) of the image bytes the landmarks were computed on. */
  readonly imageSha256: string;
  readonly imageWidth: number;
  readonly imageHeight: number;
  /** The 68-point (iBUG 300-W) layout, flattened `[x0, y0, x1, y1, ...]`, in image pixels. */
  readonly points: readonly number[];
  /** Detected face box in image pixels. */
  readonly box: { readonly x: number; readonly y: number; readonly width: number; readonly height: number };
  /** Detector confidence, 0..1. */
  readonly score: number;
  /** Which detector produced them (e.g. `face-api/ssd-mobilenet-v1+landmark68`). */
  readonly detector: string;
}

/** A reference image ready to animate: its bytes plus its landmarks. */
export interface FaceReference {
  readonly image: Uint8Array;
  readonly landmarks: FaceLandmarks;
}

export interface FaceSessionConfig {
  /**
   * PNG/JPEG bytes (landmarks are computed once per distinct image and cached) or a reference
   * prepared earlier with `FaceModel.prepareReference` (no detection at all). Absent: the
   * model's default face.
   */
  readonly referenceImage?: Uint8Array | FaceReference;
  /**
   * The variant's `model_configurations` as stored by the REST API (snake_case), validated
   * against the variant's `configuration_schema`; omitted fields take the schema defaults.
   */
  readonly configuration?: Record<string, unknown>;
  /**
   * Image format of emitted frames. Default `jpeg`. `i420` is what WebRTC video sources take:
   * models that can make it where they render (the human face models, on their render worker)
   * spare the event loop a conversion per frame.
   */
  readonly imageFormat?: FaceImageFormat;
}

export interface FaceTurnOptions {
  /**
   * Phoneme timings of the audio pushed so far in this turn, relative to the turn's first
   * sample (as a TTS provides them). They sharpen mouth shapes; audio alone also works.
   */
  readonly phonemes?: readonly PhonemeTiming[];
}

/**
 * The clock-free core of a session: queue speech, then pull frames one by one. Benchmarks and
 * offline renderers use it directly; `FaceSession` drives one from a `Clock` at 25 fps.
 */
export type FaceImageFormat = 'jpeg' | 'rgb' | 'i420';

export interface FaceFrameSource {
  readonly width: number;
  readonly height: number;
  /** Starts a new turn (ending an open one first). `pushAudio` starts one implicitly. */
  startTurn(options?: FaceTurnOptions): void;
  /** Queues 16 kHz mono int16 speech for the current turn. */
  pushAudio(pcm16k: Int16Array, turn?: FaceTurnOptions): void;
  /** No more audio for the current turn: play what is queued, then fade out. */
  endTurn(): void;
  /** Drops queued speech and fades to idle (within 200 ms). Returns whether speech was playing or queued. */
  cancel(): boolean;
  /** Optional: the visitor's voice while they speak, as `FaceSession.listen`. */
  listen?(pcm16k: Int16Array | null): void;
  /** Whether speech is playing, queued or fading out. */
  readonly busy: boolean;
  /**
   * Advances the model by 40 ms and renders that frame (RGB). What the frame shows and plays is
   * decided when it is called (turn calls made before it count, later ones do not); the picture
   * may be rendered on another thread, so it resolves later. Calls resolve in order.
   */
  nextFrame(): Promise<FaceFrame>;
  /**
   * Optional: make pictures as `i420` (planar 4:2:0) or `jpeg` (at `jpegQuality`, 1-100)
   * instead of RGB, where they are rendered (a render worker thread keeps the conversion and
   * the encoder off the caller's event loop). A source without it makes RGB and the session
   * converts or encodes.
   */
  setImageFormat?(format: FaceImageFormat, jpegQuality?: number): void;
  /**
   * Optional, called by the session with a rendered frame just before it goes out: when that
   * frame is idle and a turn became ready to play after the frame was decided, the source
   * starts the turn in this frame's audio and returns the frame as `speech-start` (its picture
   * stays the idle one: the mouth follows from the next frame, 40 ms later). Otherwise returns
   * the frame unchanged. Without it, such a turn starts one frame later plus the render lead.
   */
  startSpeechIn?(frame: FaceFrame): FaceFrame;
  /**
   * Optional, with `startSpeechIn`: whether a turn is ready to start in a frame that goes out now
   * (what `startSpeechIn` would start). The session asks it when audio arrives, to send the turn's
   * first frame without waiting for the next frame's due time.
   */
  canStartSpeech?(): boolean;
  /**
   * Optional: render into a ring of `frames` reused buffers (an image is valid until `frames`
   * more frames are rendered), for consumers done with each image at once.
   */
  recycleImages?(frames: number): void;
  /** Optional: frees the source's renderer (a render worker's state). Frames afterwards reject. */
  close?(): void;
}

export interface FaceSession {
  /** Hot stream of frames at 25 fps from the moment the session opened; completes on end/close. */
  readonly frames: Observable<FaceFrame>;
  readonly width: number;
  readonly height: number;
  readonly imageFormat: FaceImageFormat;
  /**
   * Clock time of frame 0; frame n is due at `startedAtMs + n * 40`. A session may move it earlier
   * by under a frame when a turn's speech starts between frames, and back when it idles again.
   */
  readonly startedAtMs: number;
  startTurn(options?: FaceTurnOptions): void;
  pushAudio(pcm16k: Int16Array, turn?: FaceTurnOptions): void;
  endTurn(): void;
  /** Fades to idle within 200 ms and discards queued speech. Returns whether there was speech to cancel. */
  cancel(): boolean;
  /**
   * Optional: the visitor's voice while they speak (16 kHz mono int16, any chunk size, as it
   * arrives), so the face listens instead of idling as if alone: small nods on the visitor's
   * accents and phrase ends, attention (the in-process models: plugins/face/listening.ts).
   * `listen(null)`: the visitor stopped speaking. A face without it ignores the visitor; the
   * avatar processor forwards the user's input audio between `user-started-speaking` and
   * `user-stopped-speaking`. Not carried over `/realtime` (its protocol has no visitor audio).
   */
  listen?(pcm16k: Int16Array | null): void;
  /** Ends the open turn, plays everything already sent, then completes `frames`. */
  end(): Promise<void>;
  /** Stops at once (no more frames) and completes `frames`. */
  close(): void;
}

export interface FaceModelDescriptor {
  /** `<vendor>/<model>/<variant>`, e.g. `svc/human-portrait/v1`. */
  readonly model_variant_id: string;
  /** The parent model and `config_id` alias, e.g. `svc/human-portrait`. */
  readonly model_id: string;
  readonly title: string;
  readonly description: Readonly<Record<string, string>>;
  /** JSON Schema (draft-07, ajv-compatible) for `ModelConfig.model_configurations`. */
  readonly configuration_schema: Readonly<Record<string, unknown>>;
  readonly status: 'public' | 'available' | 'deprecated';
  readonly tags: readonly string[];
  readonly preview_media_url: string | null;
}

export interface FaceModel {
  readonly descriptor: FaceModelDescriptor;
  /**
   * Validates `model_configurations` against the variant schema and returns it with defaults
   * filled in. Throws `FaceModelError` (`invalid_configuration`) listing every problem.
   */
  validateConfiguration(configuration: unknown): Record<string, unknown>;
  /** Decodes the image and computes its landmarks (once per distinct image; cached). */
  prepareReference(image: Uint8Array, landmarks?: FaceLandmarks): Promise<FaceReference>;
  /** A clock-free frame source (RGB frames, pulled by the caller). */
  openSource(config?: FaceSessionConfig): Promise<FaceFrameSource>;
  /** A real-time session emitting frames at 25 fps on `clock`. */
  openSession(config: FaceSessionConfig | undefined, clock: Clock): Promise<FaceSession>;
}

export type FaceModelErrorCode = 'invalid_configuration' | 'invalid_image' | 'no_face_detected' | 'session_closed';

export class FaceModelError extends Error {
  constructor(
    readonly code: FaceModelErrorCode,
    message: string,
    readonly details: Record<string, unknown> | null = null,
  ) {
    super(message);
    this.name = 'FaceModelError';
  }
}
