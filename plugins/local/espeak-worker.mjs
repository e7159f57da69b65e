/**
 * eSpeak-NG worker thread. Synthesis in the wasm build is synchronous and runs at roughly 10x
 * real time, so a sentence would block the event loop for 100-300 ms and starve the output
 * transport's 20 ms pacing; here it runs off the main thread and streams chunks back as the
 * engine produces them.
 *
 * Plain JavaScript on purpose: Node 20 worker threads do not inherit tsx's loader hooks, so a
 * `.ts` worker would not start. The message protocol is typed on the main side
 * (espeak-engine.ts), which is the only user of this file.
 *
 * In:  {type:'synthesize', id, text, voice, rate, pitch} | {type:'voices', id}
 * Out: {type:'ready'} | {type:'chunk', id, pcm, events} | {type:'done', id, aborted}
 *      | {type:'voices', id, voices} | {type:'error', id, message, code}
 * Abort: the main thread writes a request id into slot (id % slots) of the shared Int32Array
 * received in workerData; the synthesis callback checks it and tells espeak to stop.
 */
import { parentPort, workerData } from 'node:worker_threads';
import initEspeak from '@echogarden/espeak-ng-emscripten';

const abortSlots = new Int32Array(workerData.abortBuffer);
const espeak = await initEspeak();
const engine = new espeak.eSpeakNGWorker();
let currentVoice = '';

const isAborted = (id) => Atomics.load(abortSlots, id % abortSlots.length) === id;

function synthesize({ id, text, voice, rate, pitch }) {
  if (isAborted(id)) {
    parentPort.postMessage({ type: 'done', id, aborted: true });
    return;
  }
  if (voice !== currentVoice) {
    const status = engine.set_voice(voice);
    if (status !== 0) {
      parentPort.postMessage({ type: 'error', id, code: 'unknown_voice', message: `espeak-ng has no voice "${voice}" (status ${status})` });
      return;
    }
    currentVoice = voice;
  }
  engine.set_rate(rate);
  engine.set_pitch(pitch);
  let aborted = false;
  engine.synthesize(text, (samples, events) => {
    const pcm = samples && samples.length > 0 ? samples : new Int16Array(0);
    parentPort.postMessage({ type: 'chunk', id, pcm, events }, [pcm.buffer]);
    // Returning true asks espeak to stop producing audio for this text.
    aborted = isAborted(id);
    return aborted;
  });
  parentPort.postMessage({ type: 'done', id, aborted });
}

parentPort.on('message', (message) => {
  try {
    if (message.type === 'synthesize') synthesize(message);
    else if (message.type === 'voices') parentPort.postMessage({ type: 'voices', id: message.id, voices: engine.list_voices() });
  } catch (err) {
    parentPort.postMessage({ type: 'error', id: message.id, code: 'engine_failure', message: String(err?.message ?? err) });
  }
});

parentPort.postMessage({ type: 'ready' });
