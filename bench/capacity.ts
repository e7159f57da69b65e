/**
 * Capacity bench (issue 17 item 6): what one 25 fps face session of the default face at its
 * default size costs on this machine, and how many would fit in 70% of the cores, next to the
 * gate's default rule (cores x 2, server/capacity/capacity-gate.ts). Run: `npm run bench -- capacity`.
 * A render figure, not a load test: the gate's default stays the measured rule; operators
 * set SVC_MAX_FACE_SESSIONS from this figure on their hardware.
 */
import { availableParallelism } from 'node:os';
import { encodeJpeg, HumanFaceModel } from '../plugins/face/index.ts';
import { defaultFaceSessionLimit } from '../server/capacity/capacity-gate.ts';
import { syntheticPhrase } from '../test/face/speech-signal.ts';
import { printJson, printTable } from './table.ts';

const FRAME_MS = 40;
const CPU_BUDGET = 0.7;

export async function run(): Promise<void> {
  const model = new HumanFaceModel('human-portrait');
  const source = await model.openSource({ configuration: {} });
  source.recycleImages(2);
  source.pushAudio(syntheticPhrase(20));
  const costs: number[] = [];
  for (let i = 0; i < 70; i++) {
    const t0 = performance.now();
    const f = await source.nextFrame();
    await encodeJpeg(f, 80);
    if (i >= 10) costs.push(performance.now() - t0);
  }
  const frameMs = costs.reduce((a, b) => a + b, 0) / costs.length;
  const cores = availableParallelism();
  const fit = Math.max(1, Math.floor((cores * CPU_BUDGET * FRAME_MS) / frameMs));
  const figures = { cores, frame_ms: Number(frameMs.toFixed(2)), sessions_in_70pct: fit, default_limit: defaultFaceSessionLimit(cores) };
  printTable([{ 'cores': cores, 'render+jpeg ms/frame': figures.frame_ms, 'sessions in 70% of cores': fit, 'gate default (cores x 2)': figures.default_limit }]);
  printJson('capacity', figures);
}
