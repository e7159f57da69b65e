/**
 * Turn taking through a real server (`server/main.ts`, offline engines, the human-portrait face)
 * and a headless WebRTC visitor (libwebrtc) going through the Session API, on a turn corpus, for
 * two agents side by side in the same run: `ours` (the defaults: a 200 ms pause, the turn
 * analyzer, preemptive replies, false-interruption resume) and `old` (the old fixed rule: 800 ms
 * of silence ends every turn, any sound over the bot cuts it), set through `advanced`.
 *
 * Corpus (made here): complete utterances (the offline STT's phrases, espeak voices at several
 * speeds), open utterances (a phrase cut with a continuation, a pause of 0.5-2 s, the rest; espeak,
 * and the human read speech of Debian's pocketsphinx-testdata cut at its quietest point mid-sentence),
 * backchannels over the bot's speech, and real interruptions (a question over the bot).
 *
 * Figures: reply latency (the visitor's last loud 10 ms -> first loud bot audio at the visitor)
 * p50/p99 on complete utterances; cut-off rate on open utterances by pause (a turn ended inside the
 * pause); backchannels resumed; real interruptions cut, and cut within 100 ms at the visitor (the
 * bot's pause or barge-in message -> its last loud audio); preemptive replies (from the call
 * records); `ours_ms`: the bot's own report, without the transport: the end of the turn
 * (`user-stopped-speaking`, after the end-of-turn wait, which is `end_of_turn_ms` apart) -> the
 * first audio written to the room, minus the engines' stages (the STT's final past the turn's
 * end, the LLM's and the TTS's first byte), so the pipeline and the face. A complete utterance
 * during which bot audio was heard is not a reply sample
 * (`replies_not_measured`). Each open utterance cut off is printed with the turn's decision.
 * `TURNS_BENCH_REPEAT` (default 1) repeats the corpus; `TURNS_BENCH_VERBOSE` prints each interruption's timeline; `TURNS_BENCH_PARTS` (complete,open,over)
 * and `TURNS_BENCH_RULES` (ours,old) run a part. `TURNS_BENCH_OPEN=beginnings` takes as open utterances
 * beginnings of the offline STT's own phrases ("What is your," ... "name?") instead, in the first two
 * voices, without the human recordings. `TURNS_BENCH_STT` names the server's speech-to-text
 * (`SVC_STT_PROVIDER`; default `local`, the phrase-list stand-in; `moonshine`: open vocabulary),
 * `TURNS_BENCH_STT_MODEL` its model (`SVC_STT_MODEL`: `base` for moonshine's larger one).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { concat, silence } from '../core/audio.ts';
import { LocalTTSService } from '../plugins/local/index.ts';
import { RoomVisitor } from '../test/agent/room-visitor.ts';
import { holdsWithin } from '../testing/until.ts';
import { startServerProcess, type ServerProcess } from '../test/sessions/server-process.ts';
import { percentile, printJson, printTable } from './table.ts';
import { BACKCHANNELS, COMPLETE, humanOpen, OPEN, VOICES } from './_turn-corpus.ts';

const RATE = 16_000;
const LOUD = 0.02;
const REPEAT = Number(process.env.TURNS_BENCH_REPEAT ?? 1);
/** Which parts to run (comma-separated `complete,open,over`; default all) and for which rules (`ours,old`): a diagnosis can run one. */
/** The server's speech-to-text (SVC_STT_PROVIDER). */
const STT = process.env.TURNS_BENCH_STT ?? 'local';
const STT_MODEL = process.env.TURNS_BENCH_STT_MODEL ?? '';
const PARTS = new Set((process.env.TURNS_BENCH_PARTS ?? 'complete,open,over').split(','));

/** Beginnings of `stt:local`'s phrases and their rests (TURNS_BENCH_OPEN=beginnings). */
const BEGINNINGS: Array<[string, string]> = [
  ['What is your,', 'name?'],
  ['What can you,', 'do?'],
  ['Tell me a,', 'joke.'],
  ['How are,', 'you?'],
];
const OPEN_CORPUS = process.env.TURNS_BENCH_OPEN === 'beginnings' ? BEGINNINGS : OPEN;
const PAUSES = [500, 800, 1200, 2000];
const INTERRUPTIONS = ['What is your name?', 'Who are you?'];

async function speak(text: string, voice: string, rateWpm: number): Promise<Int16Array> {
  const tts = new LocalTTSService({ voice, rateWpm });
  const parts: Int16Array[] = [];
  for await (const e of tts.synthesize({ text, sampleRate: RATE })) if (e.type === 'audio') parts.push(e.pcm);
  return concat(parts);
}

interface Figures {
  replyMs: number[];
  oursMs: number[];
  endOfTurnMs: number[];
  /** Complete utterances not measured: the bot was heard while the visitor spoke. */
  notQuiet: number;
  cutOffs: Record<number, { n: number; cut: number }>;
  /** Why each cut-off happened: the turn's decision and the words heard before it. */
  cutCauses: string[];
  /** The longest stall of this process (the visitor's microphone) during each open utterance, and during the cut ones. */
  stallMs: { all: number[]; cut: number[] };
  backchannels: { n: number; resumed: number };
  interruptions: { n: number; cut: number; within100: number; cutMs: number[] };
  preemptive?: { started: number; used: number; discarded: number };
}

export async function run(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-turns-'));
  let server: ServerProcess | undefined;
  const load: number[] = [];
  const stalls = monitorEventLoopDelay({ resolution: 10 });
  stalls.enable();
  try {
    server = await startServerProcess({ SVC_DATA_DIR: dataDir, DATABASE_URL: '', SVC_STT_PROVIDER: STT, SVC_STT_MODEL: STT_MODEL });
    const key = server.firstKey!;
    // The engines (the offline ones, and the speech-to-text's model) load after listening: measured once loaded.
    if (!(await holdsWithin(async () => (await fetch(`${server!.url}/readyz`)).status === 200, { timeoutMs: 60_000 }))) throw new Error('the server did not become ready within 60 s');
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${server!.url}${path}`, { method, headers: { 'x-api-key': key, 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
      return (await res.json().catch(() => undefined)) as any;
    };
    const agent = async (advanced: Record<string, unknown>) => {
      const id = (await api('POST', '/v1/agents', { title: 'bench', advanced, starts_conversation: false, allowed_hostnames: ['*'], max_concurrency: -1, session_limit_seconds: 3600 })).agent_id as string;
      await api('PATCH', `/v1/agents/${id}/status`, { status: 'published' });
      return id;
    };
    const setups = {
      ours: await agent({}),
      old: await agent({ turn_pause_ms: 800, turn_unsure_ms: 800, turn_incomplete_ms: 800, preemptive_generation: false, resume_false_interruptions: false }),
    };

    // The corpus, once for both.
    const complete: Int16Array[] = [];
    for (const [voice, wpm] of VOICES) for (const text of COMPLETE) complete.push(await speak(text, voice, wpm));
    const open: Array<[Int16Array, Int16Array, string]> = [];
    for (const [voice, wpm] of VOICES.slice(0, 2)) for (const [a, b] of OPEN_CORPUS) open.push([await speak(a, voice, wpm), await speak(b, voice, wpm), `${voice}@${wpm} "${a}"`]);
    if (OPEN_CORPUS === OPEN) open.push(...humanOpen().map(([a, b], i) => [a, b, `human ${i + 1}`] as [Int16Array, Int16Array, string]));
    const backchannels = await Promise.all(BACKCHANNELS.map((t) => speak(t, 'en-us', 190)));
    const interruptions = await Promise.all(INTERRUPTIONS.map((t) => speak(t, 'en-us', 175)));
    const storyPrompt = await speak('Tell me a joke', 'en-us', 175);

    const results: Record<string, Figures> = {};
    const rules = new Set((process.env.TURNS_BENCH_RULES ?? 'ours,old').split(','));
    for (const [name, agentId] of Object.entries(setups).filter(([name]) => rules.has(name))) {
      const res = await fetch(`${server.url}/v1/public/agents/connect`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ agent_id: agentId }) });
      const session = (await res.json()) as { room_url: string; token: string };
      const v = await RoomVisitor.join(session.room_url, session.token);
      v.sendMessage({ type: 'client-ready', version: '1.0.0' });
      await holdsWithin(() => v.ofType('bot-state').some((m) => m.state === 'listening'), { timeoutMs: 20_000, intervalMs: 20 });
      const f: Figures = { replyMs: [], oursMs: [], endOfTurnMs: [], notQuiet: 0, cutOffs: {}, cutCauses: [], stallMs: { all: [], cut: [] }, backchannels: { n: 0, resumed: 0 }, interruptions: { n: 0, cut: 0, within100: 0, cutMs: [] } };
      /** The visitor's turn is open (started and not yet ended), and when the last one ended. */
      const userTurn = () => {
        let open = false;
        let endedAt = 0;
        let botPaused = false;
        for (const m of v.messages) {
          const type = m.message.type;
          if (type === 'user-started-speaking') open = true;
          else if (type === 'user-stopped-speaking') [open, endedAt] = [false, m.at];
          else if (type === 'bot-paused') botPaused = true;
          else if (type === 'bot-resumed' || type === 'bot-interrupted' || type === 'bot-tts-stopped') botPaused = false;
        }
        return { open, endedAt, botPaused };
      };
      const quiet = async () => {
        // Until the visitor's turn has ended (a turn left open by words that go on, "...to hide,",
        // waits its incomplete bound: the next item would have been heard as its continuation),
        // the bot is not paused on visitor sound (its decision, waiting for words, would come in
        // the next item) and has been silent for a second.
        await holdsWithin(
          () => {
            const turn = userTurn();
            const now = Date.now();
            return !turn.open && !turn.botPaused && now - turn.endedAt >= 1000 && !v.speaking && !v.audioLevels.some((a) => a.at > now - 1000 && a.rms > LOUD);
          },
          { timeoutMs: 30_000, intervalMs: 20 },
        );
      };
      const sayAndWait = async (pcm: Int16Array) => {
        v.say(pcm);
        await holdsWithin(() => !v.speaking, { timeoutMs: 20_000, intervalMs: 20 });
      };
      for (let r = 0; r < REPEAT; r++) {
        // 1. Complete utterances: reply latency.
        for (const pcm of PARTS.has('complete') ? complete : []) {
          await quiet();
          const reports = v.ofType('latency-report').length;
          const saidAt = Date.now();
          await sayAndWait(concat([pcm, silence(100, RATE)]));
          const lastLoud = v.lastLoudSentAt;
          if (!(await holdsWithin(() => v.ofType('latency-report').length > reports && v.audioLevels.some((a) => a.at > lastLoud && a.rms > LOUD), { timeoutMs: 15_000, intervalMs: 20 }))) continue;
          // Bot audio heard while the visitor spoke: the bot was not quiet (a stalled machine can
          // hide a second of its answer), so the next loud audio is not the reply: not a sample.
          if (v.audioLevels.some((a) => a.at >= saidAt && a.at <= lastLoud && a.rms > LOUD)) {
            f.notQuiet++;
            continue;
          }
          f.replyMs.push(v.audioLevels.find((a) => a.at > lastLoud && a.rms > LOUD)!.at - lastLoud);
          const report = v.ofType('latency-report').at(-1)! as { user_stopped_to_bot_audio_ms: number; stages: Record<string, number | null> };
          const engines = ['stt_ms', 'llm_ttfb_ms', 'tts_ttfb_ms'].reduce((sum, k) => sum + (report.stages[k] ?? 0), 0);
          const ours = Math.max(0, report.user_stopped_to_bot_audio_ms - engines);
          f.oursMs.push(ours);
          f.endOfTurnMs.push(report.stages.end_of_turn_ms ?? 0);
          if (process.env.TURNS_BENCH_VERBOSE) console.log(`reply (${name}): ${f.replyMs.at(-1)} ms at the visitor, ours ${ours} ms; report ${report.user_stopped_to_bot_audio_ms} ms, stages ${JSON.stringify(report.stages)}, ${String((report as { turn_decision?: unknown }).turn_decision)}`);
        }
        // 2. Open utterances: was the turn ended inside the pause?
        for (const pauseMs of PARTS.has('open') ? PAUSES : []) {
          for (const [a, b, label] of open) {
            await quiet();
            const mark = v.messages.length;
            // The microphone sends queued speech from now on, in real time (later, never sooner,
            // when this process stalls): the server cannot hear the second part before this.
            const itemAt = Date.now();
            const secondAt = itemAt + (a.length / RATE) * 1000 + pauseMs;
            stalls.reset();
            await sayAndWait(concat([a, silence(pauseMs, RATE), b, silence(100, RATE)]));
            const c = (f.cutOffs[pauseMs] ??= { n: 0, cut: 0 });
            c.n++;
            const stall = Math.round(stalls.max / 1e6);
            f.stallMs.all.push(stall);
            // A turn ended before the second part began (its first 150 ms cannot end a turn either: the VAD's start is 200 ms).
            const cutAt = v.messages.slice(mark).find((m) => m.message.type === 'user-stopped-speaking' && m.at < secondAt + 150)?.at;
            if (cutAt === undefined) continue;
            c.cut++;
            f.stallMs.cut.push(stall);
            await holdsWithin(() => v.messages.slice(mark).some((m) => m.message.type === 'latency-report'), { timeoutMs: 5000, intervalMs: 20 });
            const decision = v.messages.slice(mark).find((m) => m.message.type === 'latency-report')?.message.turn_decision;
            const heard = v.messages.slice(mark).filter((m) => m.message.type === 'user-transcription' && m.at <= cutAt + 50).map((m) => m.message.text);
            f.cutCauses.push(`${pauseMs} ms, ${label}: ${String(decision)}, words ${JSON.stringify(heard)}, stall ${stall} ms`);
            if (process.env.TURNS_BENCH_VERBOSE === 'messages') {
              await quiet();
              const timeline = v.messages.slice(mark).filter((m) => m.message.type !== 'latency-report').map((m) => `+${m.at - itemAt} ${String(m.message.type)}${m.message.text === undefined ? '' : ` ${JSON.stringify(m.message.text)}`}`);
              console.log(`open ${label} at ${pauseMs} ms (second part at +${secondAt - itemAt}): ${timeline.join(', ')}`);
            }
          }
        }
        // 3. Backchannels and 4. real interruptions over the bot's answer.
        for (const [kind, list] of PARTS.has('over') ? ([['backchannel', backchannels], ['interruption', interruptions]] as const) : []) {
          for (const pcm of list) {
            await quiet();
            const mark = v.messages.length;
            v.say(storyPrompt);
            if (!(await holdsWithin(() => v.messages.slice(mark).some((m) => m.message.type === 'bot-started-speaking'), { timeoutMs: 15_000, intervalMs: 20 }))) continue;
            await new Promise((resolve) => setTimeout(resolve, 400));
            const over = v.messages.length;
            v.say(pcm);
            const decided = () => v.messages.slice(over).find((m) => ['bot-resumed', 'bot-interrupted', 'bot-tts-stopped'].includes(String(m.message.type)));
            await holdsWithin(() => decided() !== undefined, { timeoutMs: 5_000, intervalMs: 20 });
            const outcome = decided()?.message;
            const resumed = outcome?.type === 'bot-resumed';
            if (kind === 'backchannel') {
              f.backchannels.n++;
              if (resumed) f.backchannels.resumed++;
              if (process.env.TURNS_BENCH_VERBOSE) {
                const words = v.messages.slice(over).filter((m) => m.message.type === 'user-transcription').map((m) => m.message.text);
                console.log(`backchannel (${name}): outcome ${String(outcome?.type)}, words ${JSON.stringify(words)}`);
              }
            } else {
              f.interruptions.n++;
              const cut = outcome?.type === 'bot-interrupted' || (outcome?.type === 'bot-tts-stopped' && outcome.interrupted === true);
              if (cut) f.interruptions.cut++;
              // When the bot's audio stopped for the visitor: its first message about the sound (paused,
              // or the barge-in) -> the last loud audio received within the next second, the same window
              // for both rules, and before the bot starts its answer to the new question: a short
              // question ("Who are you?", 0.6 s) is answered inside that second by a quick rule, and
              // that answer is not the old one going on (the bot's `bot-started-speaking` is sent as
              // its first chunk is written, before the chunk reaches the visitor).
              const stopIndex = v.messages.findIndex((m, i) => i >= over && ['bot-paused', 'user-started-speaking'].includes(String(m.message.type)));
              const stopAt = stopIndex >= 0 ? v.messages[stopIndex]!.at : undefined;
              if (cut && stopAt !== undefined) {
                await holdsWithin(() => Date.now() > stopAt + 1000, { timeoutMs: 2000, intervalMs: 20 });
                const answerAt = v.messages.slice(stopIndex).find((m) => m.message.type === 'bot-started-speaking')?.at;
                const windowEnd = Math.min(stopAt + 1000, answerAt ?? Infinity);
                const loud = v.audioLevels.filter((a) => a.at > stopAt && a.at <= windowEnd && a.rms > LOUD);
                const cutMs = loud.length ? loud.at(-1)!.at - stopAt : 0;
                if (process.env.TURNS_BENCH_VERBOSE) console.log(`interruption (${name}): outcome ${String(outcome?.type)}, new answer ${answerAt === undefined ? 'not within the window' : `at +${answerAt - stopAt} ms`}, last loud old audio +${cutMs} ms`);
                f.interruptions.cutMs.push(cutMs);
                if (cutMs <= 100) f.interruptions.within100++;
              }
            }
            await holdsWithin(() => !v.speaking, { timeoutMs: 10_000, intervalMs: 20 });
          }
        }
      }
      load.push(Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]));
      v.sendMessage({ type: 'hang-up' });
      await new Promise((resolve) => setTimeout(resolve, 1500));
      v.close();
      const calls = await api('GET', `/v1/agents/${agentId}/calls`);
      const metadata = (calls?.data?.[0]?.metadata ?? {}) as Record<string, number>;
      f.preemptive = { started: metadata.preemptive_started ?? 0, used: metadata.preemptive_used ?? 0, discarded: metadata.preemptive_discarded ?? 0 };
      results[name] = f;
    }

    const row = (name: string) => {
      const f = results[name] ?? { replyMs: [], oursMs: [], endOfTurnMs: [], notQuiet: 0, cutOffs: {}, cutCauses: [], stallMs: { all: [], cut: [] }, backchannels: { n: 0, resumed: 0 }, interruptions: { n: 0, cut: 0, within100: 0, cutMs: [] } };
      const rate = (a: number, n: number) => (n ? Math.round((a / n) * 1000) / 10 : null);
      return {
        reply_p50_ms: percentile(f.replyMs, 50),
        reply_p99_ms: percentile(f.replyMs, 99),
        replies: f.replyMs.length,
        replies_not_measured: f.notQuiet,
        end_of_turn_p50_ms: percentile(f.endOfTurnMs, 50),
        ours_p50_ms: percentile(f.oursMs, 50),
        ours_p99_ms: percentile(f.oursMs, 99),
        ...Object.fromEntries(PAUSES.map((p) => [`cut_off_${p}ms_pct`, rate(f.cutOffs[p]?.cut ?? 0, f.cutOffs[p]?.n ?? 0)])),
        open_utterances: Object.values(f.cutOffs).reduce((n, c) => n + c.n, 0),
        backchannels_resumed_pct: rate(f.backchannels.resumed, f.backchannels.n),
        backchannels: f.backchannels.n,
        interruptions_cut_pct: rate(f.interruptions.cut, f.interruptions.n),
        interruptions_cut_within_100ms_pct: rate(f.interruptions.within100, f.interruptions.n),
        interruption_cut_p99_ms: percentile(f.interruptions.cutMs, 99),
        interruptions: f.interruptions.n,
        preemptive_started: f.preemptive?.started ?? 0,
        preemptive_used: f.preemptive?.used ?? 0,
        preemptive_discarded: f.preemptive?.discarded ?? 0,
      };
    };
    for (const [name, f] of Object.entries(results)) {
      if (f.cutCauses.length) console.log(`${name}: cut-offs\n  ${f.cutCauses.join('\n  ')}`);
      if (f.stallMs.all.length) console.log(`${name}: visitor stalls during open utterances p50 ${percentile(f.stallMs.all, 50)} ms, max ${Math.max(...f.stallMs.all)} ms`);
    }
    const ours = row('ours');
    const old = row('old');
    printTable(Object.keys(ours).map((k) => ({ figure: k, 'ours (analyzer, 200 ms pause)': String((ours as Record<string, unknown>)[k]), 'old rule (800 ms)': String((old as Record<string, unknown>)[k]) })));
    printJson('turns', { stt: STT, ...(STT_MODEL ? { stt_model: STT_MODEL } : {}), ours, old_rule: old, load_avg: Math.max(...load), corpus: { complete: 7 * VOICES.length, open: OPEN.length * 2 + humanOpen().length, pauses_ms: PAUSES, backchannels: BACKCHANNELS.length, interruptions: INTERRUPTIONS.length, repeat: REPEAT } });
  } finally {
    stalls.disable();
    server?.kill('SIGTERM');
    const exited = await Promise.race([server?.exited, new Promise((r) => setTimeout(() => r('timeout'), 10_000))]);
    if (exited === 'timeout') server?.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  }
}
