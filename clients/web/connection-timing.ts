/**
 * When each step of a call's setup happened (performance.now() marks), and the
 * `ConnectionTimingReport` built from them once the call is ready (docs/widget.md, events).
 */
import type { ConnectionTimingReportDetail } from './events.ts';

const round = (v: number) => Math.round(v * 10) / 10;
const since = (a: number | null, b: number | null) => (a === null || b === null ? null : round(b - a));

export class ConnectionTiming {
  readonly marks = {
    microphoneReady: null as number | null,
    connectRequest: null as number | null,
    connectResponse: null as number | null,
    signallingJoined: null as number | null,
    iceConnected: null as number | null,
    firstVideoFrame: null as number | null,
    botReady: null as number | null,
  };

  /** Marks a step now; a later mark of the same step replaces it unless `firstOnly`. */
  mark(step: keyof ConnectionTiming['marks'], firstOnly = false): void {
    if (firstOnly && this.marks[step] !== null) return;
    this.marks[step] = performance.now();
  }

  report(call: {
    readonly instanceId: string;
    readonly sessionId: string;
    readonly agentId: string;
    readonly scriptStart: number;
    readonly startClicked: number;
    readonly readyAt: number;
    readonly queuedMs: number;
    readonly connectAttempts: number;
  }): ConnectionTimingReportDetail {
    const m = this.marks;
    return {
      instanceId: call.instanceId,
      sessionId: call.sessionId,
      agentId: call.agentId,
      marks: { scriptStart: round(call.scriptStart), startClicked: round(call.startClicked), ...Object.fromEntries(Object.entries(m).map(([k, v]) => [k, v === null ? null : round(v)])) } as ConnectionTimingReportDetail['marks'],
      durations: {
        microphoneMs: since(call.startClicked, m.microphoneReady),
        queuedMs: round(call.queuedMs),
        connectRequestMs: since(m.connectRequest, m.connectResponse),
        signallingMs: since(m.connectResponse, m.signallingJoined),
        iceMs: since(m.signallingJoined, m.iceConnected),
        firstVideoFrameMs: since(m.signallingJoined, m.firstVideoFrame),
        botReadyMs: since(m.signallingJoined, m.botReady),
        totalMs: round(call.readyAt - call.startClicked),
      },
      connectAttempts: call.connectAttempts,
    };
  }
}
