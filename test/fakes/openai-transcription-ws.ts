/**
 * One Realtime transcription session of the OpenAI audio fake (`/v1/realtime?intent=transcription`,
 * GA events), as the service speaks it:
 *
 * - a wrong key is accepted at the handshake, then answered with an `error` event
 *   (`invalid_api_key`) and a close 3000 `invalid_request_error.invalid_api_key` (as the service
 *   does on its Realtime socket); a URL without `intent=transcription` opens a conversation
 *   session, which refuses `session.type: "transcription"` with `invalid_value`;
 * - `session.created` first; `session.update` (type transcription, `audio.input.format` audio/pcm
 *   at 24 kHz, `transcription.model` one of the fake's models) answered by `session.updated`;
 * - `input_audio_buffer.append` (base64 PCM16 24 kHz) fills the buffer; `input_audio_buffer.commit`
 *   answers `input_audio_buffer.committed {item_id, previous_item_id}` and
 *   `conversation.item.added`, then (after `transcriptionDelayMs`) one
 *   `conversation.item.input_audio_transcription.delta` per word and `.completed {transcript,
 *   usage}`; a commit of less than 100 ms is an `input_audio_buffer_commit_empty` error;
 *   `input_audio_buffer.clear` empties the buffer.
 *
 * Only manual commits (`turn_detection: null`) are modelled: the plugin's VAD cuts utterances.
 */
import type { WebSocket } from 'ws';
import type { AudioFakeState } from './openai-audio.ts';
import { INVALID_KEY } from './openai-audio.ts';

const RATE = 24_000;

export interface TranscriptionSocketRecord {
  readonly intent: string | null;
  readonly model: string | null;
  readonly token: string | null;
  /** Client events received (parsed), audio appends counted in `audioMs` instead. */
  readonly events: any[];
  audioMs: number;
  /** The session as last updated. */
  session: Record<string, any> | undefined;
  commits: number;
  closeCode?: number;
}

export function serveTranscriptionSocket(ws: WebSocket, hello: { intent: string | null; model: string | null; token: string | null }, state: AudioFakeState): TranscriptionSocketRecord {
  const { cfg, clock } = state;
  const record: TranscriptionSocketRecord = { ...hello, events: [], audioMs: 0, session: undefined, commits: 0 };
  let seq = 0;
  const id = (prefix: string) => `${prefix}_${(++seq).toString(36).padStart(6, '0')}${Math.random().toString(36).slice(2, 6)}`;
  const send = (event: Record<string, unknown>) => {
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ event_id: id('event'), ...event }));
  };
  const error = (code: string, message: string, param: string | null = null, type = 'invalid_request_error') => send({ type: 'error', error: { type, code, message, param, event_id: null } });
  ws.on('close', (code) => (record.closeCode = code));

  if (hello.token !== cfg.apiKey) {
    error('invalid_api_key', INVALID_KEY(hello.token));
    ws.close(3000, 'invalid_request_error.invalid_api_key');
    return record;
  }
  const transcription = hello.intent === 'transcription';
  send({ type: 'session.created', session: transcription ? { type: 'transcription', object: 'realtime.transcription_session', id: id('sess') } : { type: 'realtime', object: 'realtime.session', id: id('sess'), model: hello.model } });

  let buffer: Int16Array[] = [];
  let lastItem: string | null = null;
  let chain = Promise.resolve();

  ws.on('message', (data, binary) => {
    let event: any;
    try {
      event = binary ? undefined : JSON.parse(data.toString());
    } catch {
      event = undefined;
    }
    if (!event || typeof event.type !== 'string') return error('invalid_json', 'The server could not parse the event.');
    if (event.type !== 'input_audio_buffer.append') record.events.push(event);
    switch (event.type) {
      case 'session.update': {
        const s = event.session ?? {};
        if (s.type !== 'transcription' || !transcription) {
          return error('invalid_value', transcription ? "Invalid value: session.type must be 'transcription' on a transcription session." : "Invalid value: 'transcription'. This session is a realtime session; connect with intent=transcription.", 'session.type');
        }
        const input = s.audio?.input ?? {};
        if (input.format && (input.format.type !== 'audio/pcm' || input.format.rate !== RATE)) return error('invalid_value', 'Invalid value: audio.input.format must be audio/pcm at 24000 Hz.', 'session.audio.input.format');
        const model = input.transcription?.model;
        if (!cfg.transcriptionModels.includes(model)) return error('invalid_value', `Invalid value: '${model}'. Supported values are: ${cfg.transcriptionModels.join(', ')}.`, 'session.audio.input.transcription.model');
        record.session = s;
        return send({ type: 'session.updated', session: { object: 'realtime.transcription_session', ...s } });
      }
      case 'input_audio_buffer.append': {
        const bytes = Buffer.from(String(event.audio ?? ''), 'base64');
        const pcm = new Int16Array(bytes.byteLength >> 1);
        new Uint8Array(pcm.buffer).set(bytes.subarray(0, pcm.byteLength));
        buffer.push(pcm);
        record.audioMs += (pcm.length / RATE) * 1000;
        return;
      }
      case 'input_audio_buffer.clear':
        buffer = [];
        return send({ type: 'input_audio_buffer.cleared' });
      case 'input_audio_buffer.commit': {
        const samples = buffer.reduce((n, b) => n + b.length, 0);
        if ((samples / RATE) * 1000 < 100) {
          return error('input_audio_buffer_commit_empty', `Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, but buffer only has ${((samples / RATE) * 1000).toFixed(2)}ms of audio.`);
        }
        const audio = new Int16Array(samples);
        buffer.reduce((at, b) => (audio.set(b, at), at + b.length), 0);
        buffer = [];
        record.commits++;
        const itemId = id('item');
        send({ type: 'input_audio_buffer.committed', previous_item_id: lastItem, item_id: itemId });
        send({ type: 'conversation.item.added', previous_item_id: lastItem, item: { id: itemId, object: 'realtime.item', type: 'message', role: 'user', status: 'completed', content: [{ type: 'input_audio', transcript: null }] } });
        lastItem = itemId;
        chain = chain.then(() => transcribe(itemId, audio));
        return;
      }
      default:
        return error('invalid_value', `Invalid value: '${event.type}'. This event is not supported on a transcription session.`, 'type');
    }
  });

  async function transcribe(itemId: string, audio: Int16Array): Promise<void> {
    const { text, consume } = state.transcriptFor(audio, RATE);
    if (cfg.transcriptionDelayMs > 0) await clock.sleep(cfg.transcriptionDelayMs);
    for (const word of text.match(/\S+\s*/g) ?? []) {
      if (ws.readyState !== ws.OPEN) return;
      if (state.faults.malformedRealtime) {
        state.faults.malformedRealtime = false;
        ws.send('{"type": "conversation.item.input_audio_transcription.delta", "delta": "bro');
        return;
      }
      send({ type: 'conversation.item.input_audio_transcription.delta', item_id: itemId, content_index: 0, delta: word });
      if (cfg.deltaIntervalMs > 0) await clock.sleep(cfg.deltaIntervalMs);
    }
    if (ws.readyState !== ws.OPEN) return;
    consume();
    send({ type: 'conversation.item.input_audio_transcription.completed', item_id: itemId, content_index: 0, transcript: text, usage: { type: 'duration', seconds: Math.ceil(audio.length / RATE) } });
  }
  return record;
}
