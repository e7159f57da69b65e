/**
 * What one server process serves. `npm start` serves everything (all-in-one); other roles are
 * other choices of surfaces from the same parts: `REST_ONLY` (a REST API process), and the fleet's
 * runner (rooms, signalling and the bots, no REST) and API-only process (docs/deployment.md, when
 * they come) are presets here, not new wiring.
 */
export interface Surfaces {
  /** The /v1 resources (model configurations, variants, assets, agents, calls, storage) and the API docs. */
  readonly rest: boolean;
  /** The Session API (`/v1/public/agents/connect`, release) with the bots this process runs. */
  readonly sessions: boolean;
  /** Embedded WebRTC rooms: signalling (`/v1/rooms/signal`) and the room client script. */
  readonly rooms: boolean;
  /** The `/realtime` face-model WebSocket. */
  readonly realtime: boolean;
  /** The widget script (`/widget/...`) and the demo page at `/`. */
  readonly widget: boolean;
  /** `/healthz`, `/readyz` and `/metrics`. */
  readonly operations: boolean;
  /** `/v1/avatar-sessions`: our face as the avatar of LiveKit Agents (docs/livekit-agents.md). */
  readonly avatarSessions: boolean;
}

export const ALL_IN_ONE: Surfaces = { rest: true, sessions: true, rooms: true, realtime: true, widget: true, operations: true, avatarSessions: true };

/** The REST API alone (what `createServer` assembles; the REST tests' server). */
export const REST_ONLY: Surfaces = { rest: true, sessions: false, rooms: false, realtime: false, widget: false, operations: false, avatarSessions: false };

/**
 * The fleet's runner (`npm run runner`, server/runner.ts): the embedded rooms and their signalling,
 * health and metrics; its bots are mounted by the runner itself (server/fleet), not by the
 * sessions surface (which admits; a runner only runs what API processes placed on it).
 */
export const RUNNER: Surfaces = { rest: false, sessions: false, rooms: true, realtime: false, widget: false, operations: true, avatarSessions: false };

/** Refuses a choice whose parts cannot work alone. */
export function checkSurfaces(surfaces: Surfaces): Surfaces {
  // Bots need rooms: embedded ones, or the signalling of the bot host's rooms.
  if (surfaces.sessions && !surfaces.rooms) throw new Error('the sessions surface needs the rooms surface (its bots join rooms signalled here)');
  return surfaces;
}
