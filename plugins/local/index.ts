/**
 * Offline engines: the whole product runs with no cloud key.
 *
 * - `tts:local`  eSpeak-NG speech with phoneme and word timings (LocalTTSService)
 * - `stt:local`  a phrase-list STAND-IN for speech-to-text (LocalPhraseSTT)
 * - `stt:moonshine` speech-to-text of open vocabulary, English (MoonshineSTT: the Moonshine tiny or base model, from npm)
 * - `vad:local`  the WebRTC voice activity detector (WebRtcVADAnalyzer)
 * - `llm:local`  a rule-based STAND-IN for a language model (LocalResponder)
 *
 * What each does and does not do: docs/offline-engines.md.
 */
import type { Plugin, Registry } from '../../core/registry.ts';
import type { LLMService, STTService, TTSService, VADAnalyzer } from '../../processors/services.ts';
import { LocalResponder, type LocalResponderOptions } from './local-responder.ts';
import { LocalPhraseSTT, type LocalSTTOptions } from './local-stt.ts';
import { LocalTTSService, type LocalTTSOptions } from './local-tts.ts';
import { MoonshineSTT, type MoonshineSTTOptions } from './moonshine/moonshine-stt.ts';
import { WebRtcVADAnalyzer, type WebRtcVADOptions } from './webrtc-vad.ts';
import { warmLocalEngines } from './warm-up.ts';

export const localPlugin: Plugin = {
  name: 'local',
  warmUp: () => warmLocalEngines(),
  register(registry: Registry): void {
    registry.register<TTSService, LocalTTSOptions>('tts', 'local', (o) => new LocalTTSService(o), {
      label: 'Offline TTS (eSpeak-NG)',
    });
    registry.register<STTService, LocalSTTOptions>('stt', 'local', (o) => new LocalPhraseSTT(o), {
      label: 'Offline speech-to-text stand-in (phrase list, not real ASR)',
    });
    registry.register<STTService, MoonshineSTTOptions>('stt', 'moonshine', (o) => new MoonshineSTT(o), {
      label: 'Offline speech-to-text, English (Moonshine tiny or base)',
    });
    registry.register<VADAnalyzer, WebRtcVADOptions>('vad', 'local', (o) => new WebRtcVADAnalyzer(o), {
      label: 'WebRTC VAD (offline)',
    });
    registry.register<LLMService, LocalResponderOptions>('llm', 'local', (o) => new LocalResponder(o), {
      label: 'Offline responder (rule-based stand-in, not a language model)',
    });
  },
};

export { EspeakEngine, sharedEspeakEngine, ESPEAK_SAMPLE_RATE, ESPEAK_ENGINE_DEFAULTS, type EspeakEngineOptions, type EspeakVoice } from './espeak-engine.ts';
export { SILENCE_PHONEME } from './espeak-timeline.ts';
export { ESPEAK_VOICE_BY_LANGUAGE } from './espeak-voices.ts';
export { LocalEngineError, type LocalEngineErrorCode } from './local-engine-error.ts';
export { LocalResponder, LOCAL_RESPONDER_DEFAULTS, type LocalResponderOptions } from './local-responder.ts';
export { LocalPhraseSTT, LOCAL_STT_DEFAULTS, DEFAULT_STT_PHRASES, type LocalSTTOptions } from './local-stt.ts';
export { LocalTTSService, LOCAL_TTS_DEFAULTS, type LocalTTSOptions } from './local-tts.ts';
export { MoonshineEngine, sharedMoonshineEngine, MOONSHINE_ENGINE_DEFAULTS, MOONSHINE_MIN_SAMPLES, MOONSHINE_SAMPLE_RATE, type MoonshineEngineOptions, type MoonshineModelName, type MoonshineResult } from './moonshine/moonshine-engine.ts';
export { MoonshineSTT, MOONSHINE_STT_DEFAULTS, type MoonshineSTTOptions } from './moonshine/moonshine-stt.ts';
export { PhraseRecogniser, type PhraseMatch } from './phrase-recogniser.ts';
export { END_CALL_TOOL } from './responder/responder-rules.ts';
export { RESPONDER_PHRASES, pinnedLanguage } from './responder/responder-phrases.ts';
export { UNRECOGNISED_SPEECH } from './unrecognised-speech.ts';
export { WebRtcVADAnalyzer, WEBRTC_VAD_DEFAULTS, type WebRtcVADOptions } from './webrtc-vad.ts';
export { warmLocalEngines, LOCAL_WARM_UP } from './warm-up.ts';
