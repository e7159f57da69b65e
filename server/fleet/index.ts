/**
 * Sessions on a fleet (docs/deployment.md): API processes admit and place (`SVC_SESSIONS=fleet`,
 * FleetSessions), runners run the bots and host their rooms (`npm run runner`, RunnerSessions),
 * on one PostgreSQL (FleetStore and SessionStore).
 */
export { checkRunnerRow, FLEET, FleetStore, type RunnerLoadBound, type RunnerRow, type RunnerState } from './fleet-store.ts';
export { FleetSessions } from './fleet-sessions.ts';
export { RunnerSessions, type RunnerIdentity } from './runner-sessions.ts';
export { mountRunnerRoutes } from './runner-routes.ts';
export { bearerMatches, requestStart, nudgeRelease, RUNNER_PATHS } from './runner-protocol.ts';
