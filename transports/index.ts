/** Public surface of the transports: the output playback clock and the /realtime clients. */
export * from './media-sink.ts';
export * from './output-transport.ts';
export * from '../protocol/realtime.ts';
export * from './realtime/svc-client.ts';
export * from './realtime/stv-client.ts';
export * from './realtime/remote-face-session.ts';
export * from './realtime/credentials.ts';
