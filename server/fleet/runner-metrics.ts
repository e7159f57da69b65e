/**
 * A runner's own series on its `/metrics` (SVC_METRICS, docs/deployment.md "Operating"), beside
 * the capacity gate's and the face frames' that every process with bots has: its slots, live
 * sessions, state, the load it last reported and its bound, the starts it took (placements) and
 * refused, and its drains.
 */
import { Counter, Gauge, type Metric } from 'prom-client';
import type { RunnerStats } from './runner-sessions.ts';

const REFUSALS = ['runner_full', 'runner_draining', 'runner_starting', 'not_placed_here'] as const;
const LOADS = ['cpu_share', 'late_frame_share', 'event_loop_lag_ms'] as const;

export function createRunnerMetrics(read: () => RunnerStats): Metric[] {
  const registers: never[] = [];
  return [
    new Gauge({ name: 'svc_runner_slots', help: 'Runner: sessions it takes at once (SVC_RUNNER_SLOTS).', registers, collect() { this.set(read().slots); } }),
    new Gauge({ name: 'svc_runner_live_sessions', help: 'Runner: sessions whose bots it runs now.', registers, collect() { this.set(read().live); } }),
    new Gauge({
      name: 'svc_runner_state', help: 'Runner: 1 for its state now (starting, ready, draining), 0 for the others.', labelNames: ['state'], registers,
      collect() {
        const state = read().state;
        for (const s of ['starting', 'ready', 'draining'] as const) this.set({ state: s }, s === state ? 1 : 0);
      },
    }),
    new Gauge({
      name: 'svc_runner_load', help: 'Runner: the load it last reported in its registry row (cpu_share and late_frame_share 0..1, event_loop_lag_ms p99).', labelNames: ['measure'], registers,
      collect() {
        const load = read().load;
        if (load) for (const m of LOADS) this.set({ measure: m }, load[m]);
      },
    }),
    new Gauge({
      name: 'svc_runner_load_bound', help: 'Runner: its load bound; placement skips it while any reported figure is over its bound.', labelNames: ['measure'], registers,
      collect() {
        const load = read().load;
        if (load) for (const m of LOADS) this.set({ measure: m }, load.bound[m]);
      },
    }),
    new Counter({ name: 'svc_runner_placements_total', help: 'Runner: sessions placed on it whose bots it started.', registers, collect() { this.reset(); this.inc(read().placements); } }),
    new Counter({
      name: 'svc_runner_refusals_total', help: 'Runner: start requests it refused, by code (the API process placed the session elsewhere).', labelNames: ['code'], registers,
      collect() {
        this.reset();
        const refused = read().refused;
        for (const code of REFUSALS) this.inc({ code }, 0);
        for (const [code, n] of Object.entries(refused)) this.inc({ code }, n);
      },
    }),
    new Counter({ name: 'svc_runner_start_failures_total', help: 'Runner: sessions it claimed and could not start (bot_start_failed, room_creation_failed).', registers, collect() { this.reset(); this.inc(read().startFailures); } }),
    new Counter({ name: 'svc_runner_drains_total', help: 'Runner: drains begun (SIGTERM): 0 or 1.', registers, collect() { this.reset(); this.inc(read().drains); } }),
  ];
}
