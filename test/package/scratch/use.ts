// TypeScript against the package's declaration files (tsc, no tsx, no paths).
import { FrameProcessor, Pipeline, PipelineWorker, VirtualClock, frame, type Direction, type Frame, type WorkerOutcome } from 'svc-avatar/core';
import { runProcessorTest, until, ScriptedLLM } from 'svc-avatar/testing';
import type { LLMService, TTSService } from 'svc-avatar/processors';
import { localPlugin } from 'svc-avatar/plugins/local';
import { SvcClient } from 'svc-avatar/clients';

class Shout extends FrameProcessor {
  protected override process(f: Frame, direction: Direction): void {
    this.push(f.type === 'text' ? frame('text', { text: f.text.toUpperCase() }) : f, direction);
  }
}

const clock = new VirtualClock();
const worker = new PipelineWorker(new Pipeline([new Shout()]), { clock });
const outcome: Promise<WorkerOutcome> = worker.run();
const llm: LLMService = new ScriptedLLM(clock, ['hi']);
const pluginName: string = localPlugin.name;
const client: typeof SvcClient = SvcClient;
const tts: TTSService | undefined = undefined;
void [outcome, llm, pluginName, client, tts, runProcessorTest, until];

// The declarations are real types, not `any`: each line below must be a type error.
// @ts-expect-error a frame type that does not exist
frame('no-such-frame', {});
// @ts-expect-error a text frame needs its text
frame('text', {});
// @ts-expect-error the worker takes a processor, not a string
new PipelineWorker('pipeline');
