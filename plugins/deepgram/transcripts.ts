/**
 * Deepgram listen-v1 server messages -> `TranscriptEvent`s. Pure, so the mapping can be checked
 * without a socket. Only the fields we read are typed; the SDK's own types describe the rest.
 */
import type { TranscriptEvent } from '../../processors/services.ts';

interface ResultsMessage {
  type: 'Results';
  start?: number;
  duration?: number;
  is_final?: boolean;
  speech_final?: boolean;
  channel?: { alternatives?: Array<{ transcript?: string; confidence?: number; languages?: string[]; words?: Array<{ start?: number; end?: number }> }> };
}

interface UtteranceEndMessage {
  type: 'UtteranceEnd';
  last_word_end?: number;
}

/**
 * Returns the event for a message, or undefined for messages that carry no transcript
 * (Metadata, SpeechStarted, and the empty Results Deepgram sends during silence).
 * An empty-text event with `endOfUtterance` is a boundary marker: UtteranceEnd, or a
 * speech_final Results whose words were already finalised.
 */
export function toTranscriptEvent(message: unknown, language: string): TranscriptEvent | undefined {
  if (!message || typeof message !== 'object') return undefined;
  const type = (message as { type?: unknown }).type;
  if (type === 'Results') {
    const m = message as ResultsMessage;
    const alt = m.channel?.alternatives?.[0];
    const text = (alt?.transcript ?? '').trim();
    const final = m.is_final === true;
    const endOfUtterance = m.speech_final === true;
    if (!text && !(final && endOfUtterance)) return undefined;
    // `start`/`duration` span the audio window since the previous final, silence included;
    // the words say when the speech itself was.
    const words = alt?.words ?? [];
    const first = words[0]?.start;
    const last = words[words.length - 1]?.end;
    const start = typeof first === 'number' ? first : typeof m.start === 'number' ? m.start : undefined;
    const end = typeof last === 'number' ? last : typeof m.start === 'number' && typeof m.duration === 'number' ? m.start + m.duration : undefined;
    return {
      text,
      final,
      endOfUtterance,
      language: alt?.languages?.[0] ?? language,
      ...(typeof alt?.confidence === 'number' ? { confidence: alt.confidence } : {}),
      ...(start !== undefined ? { startMs: Math.round(start * 1000) } : {}),
      ...(end !== undefined ? { endMs: Math.round(end * 1000) } : {}),
    };
  }
  if (type === 'UtteranceEnd') {
    const m = message as UtteranceEndMessage;
    return {
      text: '',
      final: true,
      endOfUtterance: true,
      language,
      ...(typeof m.last_word_end === 'number' ? { endMs: Math.round(m.last_word_end * 1000) } : {}),
    };
  }
  return undefined;
}
