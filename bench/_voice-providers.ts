/**
 * The voice bench's per-provider rows (issue #31): each provider through its SDK against its wire
 * fake, the fakes in a process of their own (bench/_provider-fakes.ts).
 */
import type { TTSService } from '../processors/services.ts';
import { loadavg } from 'node:os';
import { OpenAISTTService } from '../plugins/openai/stt.ts';
import { OpenAITTSService } from '../plugins/openai/tts.ts';
import { DeepgramTTSService } from '../plugins/deepgram/tts.ts';
import { CartesiaTTSService } from '../plugins/cartesia/tts.ts';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { ProviderFakeAddresses } from './_provider-fakes.ts';
import { printJson, printTable } from './table.ts';
import { conversation, FixedLLM, FixedSTT, FixedTTS, LATENCY, p, PROVIDER_BARGE_INS, PROVIDER_TURNS, QUESTION, type RunResult } from './_voice-conversation.ts';

// ---- each new provider on its wire fake ----------------------------------------------------------

interface ProviderRow {
  readonly provider: string;
  readonly kind: 'stt' | 'tts';
  readonly result: RunResult;
}

/**
 * One row per provider added with issue #31: that provider through its SDK against its wire fake
 * (in a process of its own, bench/_provider-fakes.ts) at the fixed latency of its kind (STT final
 * 150 ms, TTS first audio 100 ms), the other services in-process. Its framework overhead is the same subtraction at the service boundary, so the SDK
 * and the loopback are the provider's, not the framework's.
 */
export async function providerRows(): Promise<ProviderRow[]> {
  // Audio as it comes (the sessions' setting): the OpenAI and Deepgram voices give no word timings,
  // and a held sentence would count its whole synthesis as the framework's.
  const counts = { turns: PROVIDER_TURNS, bargeIns: PROVIDER_BARGE_INS, audioAsItComes: true };
  // The fakes run in a process of their own: their work is not the framework's.
  const fakes = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./_provider-fakes.ts', import.meta.url)), JSON.stringify({ question: QUESTION, ...LATENCY })], { stdio: ['pipe', 'pipe', 'inherit'] });
  const { audio, deepgram, cartesia } = await new Promise<ProviderFakeAddresses>((resolve, reject) => {
    let out = '';
    fakes.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('\n')) resolve(JSON.parse(out.slice(0, out.indexOf('\n'))) as ProviderFakeAddresses);
    });
    fakes.once('exit', (code) => reject(new Error(`the provider fakes exited (${code})`)));
  });
  const rows: ProviderRow[] = [];
  // BENCH_VOICE_PROVIDERS=tts:openai,... : only these rows.
  const only = process.env.BENCH_VOICE_PROVIDERS?.split(',').map((x) => x.trim()).filter(Boolean);
  const wanted = (row: string) => !only?.length || only.some((o) => row.startsWith(o));
  try {
    for (const mode of ['realtime', 'batch'] as const) {
      if (!wanted(`stt:openai ${mode}`)) continue;
      const stt = new OpenAISTTService({ apiKey: audio.apiKey, baseUrl: audio.baseURL, mode }, {});
      rows.push({ provider: `stt:openai ${mode}`, kind: 'stt', result: await conversation({ stt, llm: new FixedLLM(), tts: new FixedTTS() }, undefined, counts) });
    }
    const voices: Array<[string, TTSService & { close?(): void }]> = [
      ['tts:openai', new OpenAITTSService({ apiKey: audio.apiKey, baseUrl: audio.baseURL }, {})],
      ['tts:deepgram', new DeepgramTTSService({ apiKey: deepgram.apiKey, baseUrl: deepgram.url }, {})],
      ['tts:cartesia', new CartesiaTTSService({ apiKey: cartesia.apiKey, baseUrl: cartesia.baseUrl, tls: { ca: cartesia.ca } }, {})],
    ];
    for (const [provider, tts] of voices) {
      if (!wanted(provider)) { tts.close?.(); continue; }
      rows.push({ provider, kind: 'tts', result: await conversation({ stt: new FixedSTT(), llm: new FixedLLM(), tts }, undefined, counts) });
      tts.close?.();
    }
  } finally {
    const exited = new Promise((resolve) => fakes.once('exit', resolve));
    fakes.stdin.end();
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 5000))]);
    fakes.kill('SIGKILL');
  }
  return rows;
}

/** The provider's own stage (STT: finalize -> final; TTS: first text sent -> first audio), and its SDK + wire share. */
function providerStage(row: ProviderRow): { all: number[]; sdkWire: number[] } {
  const label = row.kind === 'stt' ? 'STT finalize() -> final event' : 'TTS synthesize() -> first audio';
  const all = row.result.stages.get(label)!;
  const latency = row.kind === 'stt' ? LATENCY.sttFinalMs : LATENCY.ttsFirstAudioMs;
  return { all, sdkWire: all.map((ms) => ms - latency) };
}

/** The table and JSON line of the per-provider rows. */
export function printProviderRows(rows: ProviderRow[]): void {
  console.log(`\nEach new provider on its wire fake (${PROVIDER_TURNS} turns, ${PROVIDER_BARGE_INS} barge-ins each; STT final ${LATENCY.sttFinalMs} ms, TTS first audio ${LATENCY.ttsFirstAudioMs} ms at the fake)`);
  printTable(
    rows.map((row) => {
      const stage = providerStage(row);
      return {
        provider: row.provider,
        'overhead p50': p(row.result.overhead, 50),
        'overhead p99': p(row.result.overhead, 99),
        [`provider stage p50`]: p(stage.all, 50),
        'provider stage p99': p(stage.all, 99),
        'SDK + wire p50': p(stage.sdkWire, 50),
        'barge-in p50': p(row.result.bargeMs, 50),
        'barge-in p99': p(row.result.bargeMs, 99),
        'chunks after': Math.max(...row.result.bargeChunks),
      };
    }),
  );
  console.log('  provider stage: STT finalize() -> final transcript; TTS first text sent -> first audio. Goal: overhead p99 < 5 ms.');
  printJson('voice-providers', {
    loadavg_1m: +loadavg()[0]!.toFixed(2),
    turns: PROVIDER_TURNS,
    barge_ins: PROVIDER_BARGE_INS,
    vendor_latency_ms: LATENCY,
    providers: Object.fromEntries(
      rows.map((row) => {
        const stage = providerStage(row);
        return [
          row.provider,
          {
            overhead_p50_ms: p(row.result.overhead, 50),
            overhead_p99_ms: p(row.result.overhead, 99),
            [row.kind === 'stt' ? 'final_after_finalize_p50_ms' : 'first_audio_after_text_p50_ms']: p(stage.all, 50),
            [row.kind === 'stt' ? 'final_after_finalize_p99_ms' : 'first_audio_after_text_p99_ms']: p(stage.all, 99),
            sdk_wire_p50_ms: p(stage.sdkWire, 50),
            barge_in_p50_ms: p(row.result.bargeMs, 50),
            barge_in_p99_ms: p(row.result.bargeMs, 99),
            barge_in_chunks_max: Math.max(...row.result.bargeChunks),
          },
        ];
      }),
    ),
  });
}

