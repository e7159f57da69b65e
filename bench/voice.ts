/**
 * Voice benchmark: what the framework adds to a conversation turn, with the providers' latencies
 * fixed (STT final 150 ms, LLM first token 300 ms, TTS first audio 100 ms), over 50 turns of
 * speech (made by the offline TTS) fed in real time to the real WebRTC VAD.
 *
 * Two set-ups, reported separately because they answer different questions:
 *
 * - `framework`: in-process providers at those fixed latencies (the vendor-neutral service
 *   contracts of processors/services.ts). overhead = first bot audio written by the output minus
 *   the VAD's user-stopped-speaking, minus the time each provider took (measured at the service
 *   boundary, so timer lateness is not counted against the framework). This is the figure the
 *   goal (p99 < 5 ms) is about.
 * - `vendors`: the Deepgram, OpenAI and ElevenLabs plugins through their real SDKs against the
 *   local wire fakes over loopback, with the same latencies set in the fakes. Reported as the
 *   framework share (same subtraction at the service boundary), the SDK + wire share (service
 *   boundary time minus the fakes' own latency), and the end-to-end overhead (both).
 *
 * Each run also breaks the turn into stages (see STAGES) so it shows where the time goes.
 * Barge-in: from the VAD's decision that the user speaks over the bot (its interruption request)
 * to the output clearing the sink (silence), and the chunks written in between.
 */
import { DeepgramSTTService } from '../plugins/deepgram/index.ts';
import { OpenAILLMService } from '../plugins/openai/llm.ts';
import { ElevenLabsTTSService } from '../plugins/elevenlabs/tts.ts';
import { LocalTTSService } from '../plugins/local/local-tts.ts';
import { startVendorFakes } from '../test/fakes/index.ts';
import { loadavg } from 'node:os';
import { printJson, printTable } from './table.ts';
import { BARGE_INS, conversation, FixedLLM, FixedSTT, FixedTTS, LATENCY, marks, p, QUESTION, reply, STAGES, TURNS, VAD_STOP_MS, type VendorWaits } from './_voice-conversation.ts';
import { printProviderRows, providerRows } from './_voice-providers.ts';

export async function run(): Promise<void> {
  await new LocalTTSService().warmUp();
  // BENCH_VOICE_PARTS=providers: only the rows of each provider on its wire fake.
  if (process.env.BENCH_VOICE_PARTS === 'providers') return printProviderRows(await providerRows());
  const fixed = await conversation({ stt: new FixedSTT(), llm: new FixedLLM(), tts: new FixedTTS() });

  const fakes = await startVendorFakes({
    deepgram: { finalDelayMs: LATENCY.sttFinalMs, script: () => QUESTION },
    openai: { firstTokenDelayMs: LATENCY.llmFirstTokenMs, respond: () => ({ text: reply }) },
    elevenlabs: { firstAudioDelayMs: LATENCY.ttsFirstAudioMs },
  });
  const vendorWaits = (): VendorWaits => {
    const final = fakes.deepgram.finalTimings.at(-1)!;
    const llm = fakes.openai.requests.at(-1)!;
    const tts = fakes.elevenlabs.requests.find((q) => q.receivedAtMs >= (marks.ttsCall ?? 0))!;
    return {
      stt: Math.max(0, (final.sentAtMs ?? 0) - Math.max(marks.vadStop ?? 0, final.triggeredAtMs)),
      llm: (llm.firstChunkAtMs ?? llm.receivedAtMs) - llm.receivedAtMs,
      tts: (tts.firstAudioAtMs ?? tts.receivedAtMs) - tts.receivedAtMs,
    };
  };
  const vendors = await conversation(
    {
      stt: new DeepgramSTTService(fakes.pluginOptions.stt),
      llm: new OpenAILLMService(fakes.pluginOptions.llm),
      tts: new ElevenLabsTTSService(fakes.pluginOptions.tts),
    },
    vendorWaits,
  );
  await fakes.close();
  const rows = await providerRows();
  printProviderRows(rows);

  console.log(`\nWhere the time goes (ms, ${TURNS} turns): in-process providers (fixed) and vendor SDKs over loopback`);
  printTable(
    STAGES.map(([label, , , who]) => {
      const f = fixed.stages.get(label)!;
      const v = vendors.stages.get(label)!;
      return { stage: label, who, 'fixed p50': p(f, 50), 'fixed p99': p(f, 99), 'vendor SDK p50': p(v, 50), 'vendor SDK p99': p(v, 99) };
    }),
  );
  console.log('');
  printTable([
    { figure: 'framework: end of speech -> first audio (ms)', p50: p(fixed.turnMs, 50), p99: p(fixed.turnMs, 99), goal: '' },
    { figure: 'framework: VAD stop time (ms)', p50: p(fixed.vadStopMs, 50), p99: p(fixed.vadStopMs, 99), goal: '' },
    { figure: 'framework overhead, in-process providers (ms)', p50: p(fixed.overhead, 50), p99: p(fixed.overhead, 99), goal: 'p99 < 5' },
    { figure: 'framework overhead, vendor SDK run (ms)', p50: p(vendors.overhead, 50), p99: p(vendors.overhead, 99), goal: '' },
    { figure: 'SDK + loopback wire time (ms)', p50: p(vendors.sdkWire, 50), p99: p(vendors.sdkWire, 99), goal: '' },
    ...(['stt', 'llm', 'tts'] as const).map((k) => ({ figure: `  of which ${k} SDK + wire (ms)`, p50: p(vendors.sdkWireBy[k], 50), p99: p(vendors.sdkWireBy[k], 99), goal: '' })),
    { figure: 'end-to-end overhead via vendor SDKs (ms)', p50: p(vendors.vendorOverhead, 50), p99: p(vendors.vendorOverhead, 99), goal: '' },
    { figure: 'barge-in: detected -> silence, in-process (ms)', p50: p(fixed.bargeMs, 50), p99: p(fixed.bargeMs, 99), goal: '<= 20' },
    { figure: 'barge-in: detected -> silence, vendor SDKs (ms)', p50: p(vendors.bargeMs, 50), p99: p(vendors.bargeMs, 99), goal: '<= 20' },
    { figure: 'barge-in: chunks written after detection', p50: p([...fixed.bargeChunks, ...vendors.bargeChunks], 50), p99: Math.max(...fixed.bargeChunks, ...vendors.bargeChunks), goal: '<= 1' },
  ]);
  printJson('voice', {
    loadavg_1m: +loadavg()[0]!.toFixed(2),
    turns: TURNS,
    barge_ins: BARGE_INS,
    vad_stop_ms: VAD_STOP_MS,
    vendor_latency_ms: LATENCY,
    turn_latency_p50_ms: p(fixed.turnMs, 50),
    overhead_p50_ms: p(fixed.overhead, 50),
    overhead_p99_ms: p(fixed.overhead, 99),
    barge_in_p50_ms: p(fixed.bargeMs, 50),
    barge_in_p99_ms: p(fixed.bargeMs, 99),
    barge_in_chunks_max: Math.max(...fixed.bargeChunks),
    vendor_sdk: {
      turn_latency_p50_ms: p(vendors.turnMs, 50),
      framework_overhead_p50_ms: p(vendors.overhead, 50),
      framework_overhead_p99_ms: p(vendors.overhead, 99),
      sdk_wire_p50_ms: p(vendors.sdkWire, 50),
      sdk_wire_p99_ms: p(vendors.sdkWire, 99),
      sdk_wire_p50_ms_by_vendor: { deepgram: p(vendors.sdkWireBy.stt, 50), openai: p(vendors.sdkWireBy.llm, 50), elevenlabs: p(vendors.sdkWireBy.tts, 50) },
      end_to_end_overhead_p50_ms: p(vendors.vendorOverhead, 50),
      end_to_end_overhead_p99_ms: p(vendors.vendorOverhead, 99),
      barge_in_p99_ms: p(vendors.bargeMs, 99),
      barge_in_chunks_max: Math.max(...vendors.bargeChunks),
    },
  });
}

