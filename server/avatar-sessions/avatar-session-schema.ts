/** The avatar session resource's OpenAPI shapes (docs/livekit-agents.md). */
import type { JsonSchema } from '../http/api-routes.ts';
import { dateTime, described, nullable, responseShape, uuid } from '../rest/schema/common.ts';

export const AVATAR_SESSION_LIMITS = {
  configIdMaxLength: 200,
  urlMaxLength: 2048,
  tokenMaxLength: 8192,
  maxDurationS: { min: 10, max: 3600 },
} as const;

export const avatarSessionInputSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['config_id', 'livekit_url', 'livekit_token'],
  properties: {
    config_id: { type: 'string', minLength: 1, maxLength: AVATAR_SESSION_LIMITS.configIdMaxLength, description: 'The face: a model configuration id of your organization or a template alias (`svc/human-portrait`, `svc/human-presence`).' },
    livekit_url: { type: 'string', minLength: 1, maxLength: AVATAR_SESSION_LIMITS.urlMaxLength, pattern: '^[wW][sS][sS]?://', description: 'The LiveKit server the agent is in (`wss://...`). Private addresses only through SVC_LIVEKIT_ALLOWED_RANGES.' },
    livekit_token: {
      type: 'string', minLength: 1, maxLength: AVATAR_SESSION_LIMITS.tokenMaxLength,
      description: "A LiveKit access token the agent minted for the avatar: its identity, `roomJoin` for the agent's room, attribute `lk.publish_on_behalf` = the agent's identity (kind `agent` recommended), unexpired.",
    },
    max_duration_s: { type: 'integer', minimum: AVATAR_SESSION_LIMITS.maxDurationS.min, maximum: AVATAR_SESSION_LIMITS.maxDurationS.max, description: 'End the session after this many seconds at the latest (default and ceiling: the server\'s, 3600).' },
  },
};

const ms = (description: string): JsonSchema => ({ type: ['integer', 'number', 'null'], description });

export const avatarSessionSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    avatar_session_id: described(uuid, 'Id of the avatar session.'),
    status: { type: 'string', enum: ['active', 'ended'], description: '`active` while the avatar is in the room; `ended` after.' },
    config_id: { type: 'string', description: 'The model configuration the face was made from.' },
    room: { type: 'string', description: 'The LiveKit room (from the token).' },
    avatar_identity: { type: 'string', description: "The avatar's identity in the room (from the token)." },
    agent_identity: { type: 'string', description: 'The agent the avatar speaks for (`lk.publish_on_behalf`).' },
    video: {
      type: 'object', description: 'What the avatar publishes.',
      properties: {
        width: { type: 'integer', description: 'Picture width (0 before the first frame).' },
        height: { type: 'integer', description: 'Picture height (0 before the first frame).' },
        fps: { type: 'integer', description: 'Frames per second (25).' },
      },
    },
    created_at: described(dateTime, 'When the request arrived.'),
    ended_at: described(nullable(dateTime), 'When the session ended, or null.'),
    end_reason: { type: ['string', 'null'], enum: ['agent_left', 'agent_absent', 'room_closed', 'time_limit', 'face_ended', 'deleted', 'server_shutdown', null], description: 'Why it ended: the agent left the room, never came, the room closed, the time limit, the face ended, DELETE, or the server shut down; null while active.' },
    metrics: {
      type: 'object', description: 'Figures of this session (the same as /metrics).',
      properties: {
        join_ms: ms('Request to the avatar in the room, publishing.'),
        first_frame_ms: ms('Request to the first video frame published.'),
        first_audio_to_first_speech_frame_ms: ms("The agent's first audio received to the first frame that plays it."),
        av_offset_ms: ms('How much sooner the latest speech picture was sent than its sound (the audio queued ahead of it, less the time the picture was held back); negative: after it. Null before speech.'),
        audio_underruns: { type: 'integer', description: "Times the avatar's outgoing audio ran dry before the next audio came (a gap the visitor's jitter buffer must cover; gaps under 2 ms are not counted). An interruption's cleared queue is not one." },
        audio_underrun_ms: { type: 'integer', description: 'The underruns\' total length (ms).' },
        segments: { type: 'integer', description: 'Speech segments (lk.audio_stream byte streams) received from the agent.' },
        segments_interrupted: { type: 'integer', description: 'Segments finished interrupted (lk.clear_buffer, or refused).' },
        clears: { type: 'integer', description: 'lk.clear_buffer calls answered.' },
        last_clear_ms: ms('How long the last lk.clear_buffer took to drop the queued sound and cancel the face.'),
        last_clear_at: described(nullable(dateTime), 'When the last lk.clear_buffer arrived, or null.'),
        streams_refused: { type: 'integer', description: 'Byte streams refused (bad header, not from the agent, too long).' },
        last_stream_error: {
          type: ['object', 'null'], description: 'The last refused stream: `code` (`missing_audio_format`, `bad_sample_rate`, `bad_channel_count`, `segment_too_long`, `not_the_agent`) and `message`.',
          properties: { code: { type: 'string', description: 'Stable code.' }, message: { type: 'string', description: 'Explanation.' } },
        },
        rpc_failures: { type: 'integer', description: 'lk.playback_started / lk.playback_finished calls to the agent that failed.' },
      },
    },
  },
});
