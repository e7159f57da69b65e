/**
 * Values of a new agent for every field the create request leaves out. The spec does not show
 * them; each is a decision recorded in docs/decisions-rest.md.
 */
export const AGENT_DEFAULTS = {
  description: null,
  mode: 'svc',
  /** New agents are private until published: nobody can connect by accident. */
  status: 'unpublished',
  face_id: null,
  language: 'en',
  system_prompt: null,
  /** The offline TTS, so a new agent works without any cloud key. */
  tts_provider: 'local',
  voice_id: null,
  behaviour: {
    greeting: '',
    greeting_reference: '',
    greeting_mode: 'verbatim',
    nudge_message: '',
    nudge_reference: '',
    nudge_mode: 'verbatim',
    farewell_message: '',
    farewell_reference: '',
    farewell_mode: 'verbatim',
    max_conversation_duration_seconds: 1800,
    /** 0 = never nudge an inactive user. */
    inactivity_nudge_seconds: 0,
    allow_interruption: true,
  },
  advanced: {
    max_video_source_dimension: 1280,
    llm_max_tokens: 1024,
  },
  sts_provider: null,
  sts_config_id: null,
  provider_config: {},
  preview_url: null,
  starts_conversation: true,
  session_limit_seconds: 600,
  max_concurrency: 5,
  auth_enabled: false,
  /** Empty allowlist = private (spec: every Session API request is rejected). */
  allowed_hostnames: null,
} as const;
