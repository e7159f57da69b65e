/**
 * A TTS service run by the TTS processor on a worker, as in a bot: what the TTS plugin tests use
 * to check interruption (no audio after the cut), failures and words as they leave.
 */
import { RealClock } from '../../core/clock.ts';
import { frame, type Frame } from '../../core/frames.ts';
import { Pipeline } from '../../core/pipeline.ts';
import { PipelineWorker } from '../../core/worker.ts';
import { CaptureProcessor, HARNESS_IGNORED } from '../../core/testing/index.ts';
import type { TTSService } from '../../processors/services.ts';
import { TTSProcessor } from '../../processors/tts/tts-processor.ts';

export type TTSAudioFrame = Frame & { type: 'tts-audio' };

export function ttsOnProcessor(service: TTSService, options: { sampleRate?: number; voiceId?: string } = {}) {
  // Audio leaves as it comes, as in a session (an AvatarProcessor follows the TTS there).
  const processor = new TTSProcessor(service, { holdAudioForWordTimings: false, ...(options.voiceId ? { voiceId: options.voiceId } : {}) });
  const below = new CaptureProcessor('downstream', new Set(HARNESS_IGNORED));
  const worker = new PipelineWorker(new Pipeline([processor, below]), { clock: new RealClock(), audioOutSampleRate: options.sampleRate ?? 16_000, idleTimeoutMs: null, heartbeatMs: null, allowInterruptions: true });
  const errors: { code?: string; fatal: boolean; message: string }[] = [];
  worker.events$.subscribe((e) => {
    if (e.type === 'error') errors.push({ code: e.frame.code, fatal: e.frame.fatal, message: e.frame.message });
  });
  const finished = worker.run();
  const audio = () => below.frames.filter((f): f is TTSAudioFrame => f.type === 'tts-audio');
  /** Index in `below.frames` of the first interruption seen downstream. */
  const interruptedAt = () => below.frames.findIndex((f) => f.type === 'interruption');
  return {
    worker,
    below,
    errors,
    finished,
    audio,
    interruptedAt,
    /** tts-audio frames that left after the interruption reached the bottom of the pipeline. */
    audioAfterInterruption: () => below.frames.slice(interruptedAt() + 1).filter((f): f is TTSAudioFrame => f.type === 'tts-audio' && f.pcm.length > 0),
    speak: (text: string) => worker.queueFrame(frame('tts-speak', { text })),
    stop: () => worker.cancel('test over'),
  };
}
