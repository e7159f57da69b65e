/**
 * A voice activity detector for LiveKit Agents (Node) made of nothing but signal energy: what the
 * avatar tests use so that a real `AgentSession` hears a visitor speak over it (its interruption
 * by audio activity) without Silero's model, which cannot be installed here. It implements the
 * package's `VAD` / `VADStream` contract: every 10-20 ms frame gives an `INFERENCE_DONE` event,
 * `START_OF_SPEECH` after `minSpeechMs` loud, `END_OF_SPEECH` after `minSilenceMs` quiet.
 */
import { VAD, VADEventType, VADStream, type VADEvent } from '@livekit/agents';
import type { AudioFrame } from '@livekit/rtc-node';

export const ENERGY_VAD_DEFAULTS = {
  /** RMS (of full scale) above which a frame counts as speech. */
  threshold: 0.02,
  minSpeechMs: 60,
  minSilenceMs: 400,
} as const;

export class EnergyVAD extends VAD {
  label = 'energy-vad';
  constructor(readonly settings: { threshold: number; minSpeechMs: number; minSilenceMs: number } = { ...ENERGY_VAD_DEFAULTS }) {
    super({ updateInterval: 20 });
  }

  stream(): VADStream {
    return new EnergyVADStream(this, this.settings);
  }
}

class EnergyVADStream extends VADStream {
  constructor(vad: VAD, private readonly settings: EnergyVAD['settings']) {
    super(vad);
    void this.run();
  }

  private async run(): Promise<void> {
    let speaking = false;
    let speechMs = 0;
    let silenceMs = 0;
    let loudMs = 0;
    let samplesIndex = 0;
    for (;;) {
      let next;
      try {
        next = await this.inputReader.read();
      } catch {
        return;
      }
      if (next.done) return;
      const value = next.value;
      if (typeof value === 'symbol') {
        speaking = false;
        speechMs = silenceMs = loudMs = 0;
        continue;
      }
      const frame = value as AudioFrame;
      const ms = (frame.samplesPerChannel / frame.sampleRate) * 1000;
      samplesIndex += frame.samplesPerChannel;
      let sum = 0;
      for (const s of frame.data) sum += (s / 32768) ** 2;
      const loud = Math.sqrt(sum / Math.max(1, frame.data.length)) >= this.settings.threshold;
      const event = (type: VADEventType, extra: Partial<VADEvent> = {}): VADEvent => ({
        type, samplesIndex, timestamp: Date.now(), speechDuration: speechMs, silenceDuration: silenceMs, frames: [frame],
        probability: loud ? 1 : 0, inferenceDuration: 0, speaking, rawAccumulatedSilence: silenceMs, rawAccumulatedSpeech: speechMs, ...extra,
      });
      if (loud) {
        loudMs += ms;
        silenceMs = 0;
        if (!speaking && loudMs >= this.settings.minSpeechMs) {
          speaking = true;
          speechMs = loudMs;
          if (!this.sendVADEvent(event(VADEventType.START_OF_SPEECH))) return;
        } else if (speaking) speechMs += ms;
      } else {
        loudMs = 0;
        if (speaking) {
          silenceMs += ms;
          if (silenceMs >= this.settings.minSilenceMs) {
            speaking = false;
            if (!this.sendVADEvent(event(VADEventType.END_OF_SPEECH))) return;
            speechMs = 0;
          }
        }
      }
      if (!this.sendVADEvent(event(VADEventType.INFERENCE_DONE))) return;
    }
  }
}
