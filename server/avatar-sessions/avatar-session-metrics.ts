/**
 * /metrics series of the avatar sessions (what LiveKit Agents users asked avatar vendors for:
 * join time, time to the first frame, A/V offset). Registered into the server's registry by
 * `createServerMetrics({ extra })`.
 */
import { Counter, Gauge, Histogram, type Metric } from 'prom-client';

export interface AvatarSessionMetrics {
  readonly metrics: readonly Metric[];
  /** The request's arrival to the worker in the room with its audio track published. */
  join(seconds: number): void;
  /** The request's arrival to the first picture handed to the room's video source. */
  firstFrame(seconds: number): void;
  /** Audio queued ahead of a speech picture when it left (the picture shows this much before its sound). */
  avOffset(seconds: number): void;
  /** An `lk.clear_buffer` to the queued sound dropped and the face cancelled. */
  clear(seconds: number): void;
  ended(reason: string): void;
}

export function createAvatarSessionMetrics(live: () => number): AvatarSessionMetrics {
  const registers: never[] = [];
  const join = new Histogram({ name: 'svc_avatar_session_join_seconds', help: 'Avatar sessions (LiveKit Agents): POST /v1/avatar-sessions to the avatar in the room, publishing.', buckets: [0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10], registers });
  const firstFrame = new Histogram({ name: 'svc_avatar_session_first_frame_seconds', help: 'Avatar sessions: POST /v1/avatar-sessions to the first video frame published in the room.', buckets: [0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10], registers });
  const avOffset = new Histogram({ name: 'svc_avatar_session_av_offset_seconds', help: 'Avatar sessions: how much sooner a speech picture was sent than its sound (the audio queued ahead of it, less the time it was held back; negative: after it), sampled once a second.', buckets: [-0.1, -0.06, -0.04, -0.02, -0.01, 0, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2], registers });
  const clear = new Histogram({ name: 'svc_avatar_session_clear_seconds', help: 'Avatar sessions: lk.clear_buffer received to the face cancelled and the queued sound dropped.', buckets: [0.0005, 0.001, 0.005, 0.01, 0.04], registers });
  const ended = new Counter({ name: 'svc_avatar_sessions_ended_total', help: 'Avatar sessions ended, by reason (agent_left, room_closed, time_limit, deleted, ...).', labelNames: ['reason'], registers });
  const gauge = new Gauge({ name: 'svc_avatar_sessions_live', help: 'Avatar sessions (LiveKit Agents) this process runs now.', registers, collect() { this.set(live()); } });
  return {
    metrics: [join, firstFrame, avOffset, clear, ended, gauge],
    join: (s) => join.observe(s),
    firstFrame: (s) => firstFrame.observe(s),
    avOffset: (s) => avOffset.observe(s),
    clear: (s) => clear.observe(s),
    ended: (reason) => ended.inc({ reason }),
  };
}
