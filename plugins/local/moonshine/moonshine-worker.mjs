/**
 * Moonshine worker thread: runs the speech-to-text model (an encoder and a decoder in ONNX, from
 * the npm package `@usefulsensors/moonshine-js`) with onnxruntime-node, off the main thread, so a
 * 30-150 ms recognition never holds up a live session's 20 ms audio or 40 ms frames.
 *
 * Plain JavaScript on purpose: Node 20 worker threads do not inherit tsx's loader hooks (as
 * espeak-worker.mjs). The message protocol is typed on the main side (moonshine-engine.ts).
 *
 * workerData: { encoderPath, decoderPath, threads, layers, heads, headDim, vocabulary }
 * In:  {type:'transcribe', id, audio: Float32Array (16 kHz, -1..1), maxTokens}
 * Out: {type:'ready'} | {type:'failed', message}
 *      | {type:'text', id, text, tokens, confidence, ms} | {type:'error', id, message}
 *
 * Decoding is greedy (the model's own decoder loop: start token 1, end token 2, the decoder's
 * self-attention cache carried from step to step, the cross-attention cache kept from step 0).
 * The end token is not taken at the first step: on short utterances the model often ends at once
 * (an empty transcript) when a word was said; the first step then takes its best other token.
 */
import { parentPort, workerData } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import llamaTokenizer from 'llama-tokenizer-js';

const START = 1;
const END = 2;
const { encoderPath, decoderPath, threads, layers, heads, headDim, vocabulary } = workerData;

let encoder;
let decoder;
try {
  const options = { intraOpNumThreads: threads, interOpNumThreads: 1, executionProviders: ['cpu'], graphOptimizationLevel: 'all' };
  encoder = await ort.InferenceSession.create(encoderPath, options);
  decoder = await ort.InferenceSession.create(decoderPath, options);
  parentPort.postMessage({ type: 'ready' });
} catch (err) {
  parentPort.postMessage({ type: 'failed', message: String(err?.message ?? err) });
}

const presentNames = decoder ? decoder.outputNames.filter((name) => name.startsWith('present')) : [];

function emptyCache() {
  const cache = {};
  for (let i = 0; i < layers; i++) {
    for (const part of ['decoder', 'encoder']) {
      for (const kind of ['key', 'value']) cache[`past_key_values.${i}.${part}.${kind}`] = new ort.Tensor('float32', new Float32Array(0), [0, heads, 1, headDim]);
    }
  }
  return cache;
}

async function transcribe({ id, audio, maxTokens }) {
  const started = performance.now();
  const encoded = await encoder.run({ input_values: new ort.Tensor('float32', audio, [1, audio.length]) });
  const cache = emptyCache();
  const cacheNames = Object.keys(cache);
  const tokens = [];
  let logProbability = 0;
  let next = START;
  for (let step = 0; step < maxTokens; step++) {
    const out = await decoder.run({
      input_ids: new ort.Tensor('int64', BigInt64Array.of(BigInt(next)), [1, 1]),
      encoder_hidden_states: encoded.last_hidden_state,
      use_cache_branch: new ort.Tensor('bool', [step > 0], [1]),
      ...cache,
    });
    const logits = out.logits.data;
    const size = out.logits.dims[2];
    const offset = logits.length - size;
    let best = -1;
    for (let k = 0; k < size; k++) {
      if (step === 0 && k === END) continue;
      if (best < 0 || logits[offset + k] > logits[offset + best]) best = k;
    }
    // The chosen token's probability (softmax), for the transcript's confidence.
    let sum = 0;
    const top = logits[offset + best];
    for (let k = 0; k < size; k++) sum += Math.exp(logits[offset + k] - top);
    logProbability += -Math.log(sum);
    if (best === END) break;
    tokens.push(best);
    next = best;
    // Self-attention keys grow every step; the cross-attention ones are made once, at step 0.
    cacheNames.forEach((name, index) => {
      if (step === 0 || name.includes('.decoder.')) cache[name] = out[presentNames[index]];
    });
  }
  const known = tokens.filter((t) => t > END && t < vocabulary);
  const text = known.length ? llamaTokenizer.decode([START, ...known]).trim() : '';
  const confidence = tokens.length ? Math.exp(logProbability / (tokens.length + 1)) : 0;
  parentPort.postMessage({ type: 'text', id, text, tokens: tokens.length, confidence, ms: performance.now() - started });
}

// One recognition at a time, in arrival order (two at once would only share the same cores).
let queue = Promise.resolve();
parentPort.on('message', (message) => {
  if (message.type !== 'transcribe') return;
  if (!encoder || !decoder) {
    parentPort.postMessage({ type: 'error', id: message.id, message: 'the model did not load' });
    return;
  }
  queue = queue.then(() => transcribe(message)).catch((err) => parentPort.postMessage({ type: 'error', id: message.id, message: String(err?.message ?? err) }));
});
