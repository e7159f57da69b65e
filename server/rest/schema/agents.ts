import { dateTime, described, nullable, uuid, responseShape } from './common.ts';
import type { JsonSchema } from '../../http/api-routes.ts';

/** Spec "Limits" for agents and tools, plus our decisions for what it leaves open. */
export const AGENT_LIMITS = {
  titleMaxLength: 255,
  descriptionMaxLength: 1000,
  systemPromptMaxLength: 10_000,
  voiceIdMaxLength: 255,
  stsConfigIdMaxLength: 255,
  stsProviderMaxLength: 100,
  stsApiKeyMaxLength: 1000,
  previewUrlMaxLength: 2048,
  sessionLimitSeconds: { min: 1, max: 86_400 },
  maxConcurrency: { unbounded: -1, min: 1, max: 100 },
  toolNameMaxLength: 64,
  toolDescriptionMaxLength: 1024,
  toolUrlMaxLength: 2048,
  /** Decision: at most 64 tools per agent (the LLM tool list must stay small). */
  maxTools: 64,
  /** Decision: hostname allowlist of at most 100 entries of at most 253 characters (DNS limit). */
  maxAllowedHostnames: 100,
  hostnameMaxLength: 253,
  /** Decision: behaviour texts (greeting, nudge, farewell and their references) up to 2000 characters. */
  behaviourTextMaxLength: 2000,
  /** Decision: turn-taking bounds (ms) an agent may set in `advanced` (docs/behaviours.md). */
  turnPauseMs: { minimum: 100, maximum: 2000 },
  turnUnsureMs: { minimum: 100, maximum: 5000 },
  turnIncompleteMs: { minimum: 100, maximum: 10_000 },
  falseInterruptionMs: { minimum: 100, maximum: 5000 },
  backchannelWordsMax: 50,
  backchannelWordMaxLength: 40,
  /** Decision: provider_config serialised size cap. */
  providerConfigMaxBytes: 16_384,
} as const;

/** Decision: spoken language codes (ISO 639-1) supported by the speech pipeline. */
export const AGENT_LANGUAGES = ['en', 'es', 'fr', 'de', 'it', 'pt', 'nl', 'pl', 'sv', 'da', 'no', 'fi', 'cs', 'ru', 'uk', 'tr', 'ar', 'hi', 'ja', 'ko', 'zh'] as const;

/** Decision: `verbatim` speaks the text as written; `generated` lets the language model phrase it. */
export const BEHAVIOUR_MODES = ['verbatim', 'generated'] as const;

const text = (max: number, description: string) => ({ type: 'string', maxLength: max, description });
const nullableText = (max: number, description: string) => ({ type: ['string', 'null'], maxLength: max, description });
const modeField = (what: string) => ({ type: 'string', enum: BEHAVIOUR_MODES, description: `How the ${what} is spoken: \`verbatim\` (as written) or \`generated\` (the language model phrases it from the text).` });

/** Field descriptions shared by the input and output shapes of an agent. */
const AGENT_FIELD = {
  agent_id: 'Id of the agent.',
  organization_id: 'Owning organization.',
  created_by: 'Creator: a user id, or `api_key:<id>`.',
  title: 'Display title (up to 255 characters).',
  description: 'Free description (up to 1000 characters), or null.',
  mode: '`svc`: our voice pipeline (speech-to-text, language model, text-to-speech) drives the face; `third_party`: a speech-to-speech provider (`sts_provider`) does.',
  status: '`published` agents accept connections; `unpublished` ones do not (the default).',
  face_id: 'The face: a model configuration id (`model_config_id`) of your organization or a template; null for the default face.',
  language: 'Spoken language (ISO 639-1): speech-to-text language, voice filtering and a system-prompt suffix pinning the answer language.',
  system_prompt: 'Instructions for the language model (up to 10,000 characters), or null.',
  tts_provider:
    'Text-to-speech provider slug (an installed `tts` plugin): `local` (default, eSpeak-NG offline), `elevenlabs`, `openai` (OpenAI or an OpenAI-compatible /v1/audio/speech server), `deepgram` (Aura), `cartesia` (Sonic). `voice_id` is that provider\'s voice (docs/vendors.md, "Voices per provider"); a provider whose key the deployment lacks fails the session start with `failure_reason` `tts_key_missing`.',
  voice_id: "Voice of the text-to-speech provider (provider-specific id), or null for the provider's default.",
  behaviour: 'Greeting, inactivity nudge, farewell, conversation duration and interruption settings.',
  advanced: 'Tuning: `max_video_source_dimension`, `llm_max_tokens`, and turn taking (`turn_pause_ms`, `turn_unsure_ms`, `turn_incomplete_ms`, `preemptive_generation`, `resume_false_interruptions`, `false_interruption_ms`, `backchannel_words`; absent = the defaults in docs/behaviours.md).',
  sts_provider: 'Speech-to-speech provider slug for `third_party` agents (see `GET /agents/providers`), or null.',
  sts_config_id: "The provider's own configuration id (assistant, agent, ...), or null.",
  sts_api_key: 'API key of the speech-to-speech provider; stored encrypted and never returned (`sts_api_key_set`); null clears it.',
  sts_api_key_set: 'Whether a provider API key is stored (the key itself is never returned).',
  provider_config: "Free-form settings of the speech-to-speech provider (its descriptor's `required_persisted` / `optional_persisted` fields); replaced whole by PATCH.",
  preview_url: 'Preview image or video: an http(s) URL or a bare asset id (resolved to a signed URL for public clients), or null.',
  starts_conversation: 'Whether the agent speaks first (its greeting) when a session starts.',
  session_limit_seconds: 'Longest session, 1 to 86400 seconds.',
  max_concurrency: '-1 (unbounded) or 1 to 100 simultaneous sessions.',
  auth_enabled: 'Whether sessions need the agent auth secret.',
  auth_secret_set: 'Whether an auth secret is stored.',
  allowed_hostnames: 'Hostnames whose pages may start sessions (exact match on the Origin hostname, `*` for any), null or an empty list: private, no session can be started.',
  tools: 'Functions the language model may call (at most 64).',
  created_at: 'Creation time.',
  updated_at: 'Last modification time.',
} as const;

export const behaviourSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    greeting: text(AGENT_LIMITS.behaviourTextMaxLength, 'What the agent says first when it starts the conversation.'),
    greeting_reference: text(AGENT_LIMITS.behaviourTextMaxLength, 'Guidance the language model follows when `greeting_mode` is `generated`.'),
    greeting_mode: modeField('greeting'),
    nudge_message: text(AGENT_LIMITS.behaviourTextMaxLength, 'What the agent says after `inactivity_nudge_seconds` of silence from the user.'),
    nudge_reference: text(AGENT_LIMITS.behaviourTextMaxLength, 'Guidance for a `generated` nudge.'),
    nudge_mode: modeField('nudge'),
    farewell_message: text(AGENT_LIMITS.behaviourTextMaxLength, 'What the agent says when it ends the conversation.'),
    farewell_reference: text(AGENT_LIMITS.behaviourTextMaxLength, 'Guidance for a `generated` farewell.'),
    farewell_mode: modeField('farewell'),
    max_conversation_duration_seconds: { type: 'integer', minimum: 1, maximum: 86_400, description: 'The conversation ends (with the farewell) after this many seconds (default 1800).' },
    inactivity_nudge_seconds: { type: 'integer', minimum: 0, maximum: 3600, description: 'Seconds of user silence before the nudge; 0 disables the nudge.' },
    allow_interruption: { type: 'boolean', description: 'Whether the user may interrupt the agent while it speaks (barge-in).' },
  },
};

export const advancedSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    max_video_source_dimension: { type: 'integer', minimum: 64, maximum: 4096, description: 'Longest side, in pixels, of images and video the agent works from (default 1280).' },
    llm_max_tokens: { type: 'integer', minimum: 1, maximum: 32_768, description: 'Most tokens the language model may produce per answer (default 1024).' },
    turn_pause_ms: { type: 'integer', ...AGENT_LIMITS.turnPauseMs, description: "Silence (ms) after the visitor's speech before the turn analyzer decides whether the turn is over (default 200)." },
    turn_unsure_ms: { type: 'integer', ...AGENT_LIMITS.turnUnsureMs, description: 'Silence (ms) that ends a turn the analyzer is unsure about (default 1500). At least `turn_pause_ms`.' },
    turn_incomplete_ms: { type: 'integer', ...AGENT_LIMITS.turnIncompleteMs, description: 'Silence (ms) that ends a turn the analyzer judged unfinished, a pause to think (default 2500). At least `turn_unsure_ms`.' },
    preemptive_generation: { type: 'boolean', description: 'Start the answer during an undecided pause, played only if the turn ends with the same words (default true).' },
    resume_false_interruptions: { type: 'boolean', description: 'Visitor sound over the agent pauses it, and a backchannel ("uh-huh") or no words resumes it; false: any sound cuts it (default true). Needs `behaviour.allow_interruption`.' },
    false_interruption_ms: { type: 'integer', ...AGENT_LIMITS.falseInterruptionMs, description: 'After the sound over a paused agent stops, how long it waits for words before resuming (default 600).' },
    backchannel_words: {
      type: 'array',
      maxItems: AGENT_LIMITS.backchannelWordsMax,
      items: { type: 'string', minLength: 1, maxLength: AGENT_LIMITS.backchannelWordMaxLength },
      description: 'More words or short phrases that do not interrupt the agent, beside the built-in ones of its language.',
    },
  },
};

export const TOOL_NAME_PATTERN = '^[a-zA-Z0-9_-]+$';

export const toolInputSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['function', 'delivery'],
  properties: {
    tool_id: { ...uuid, description: 'Ignored on input; tools are matched by function.name.' },
    enabled: { type: 'boolean', default: true, description: 'A disabled tool keeps its configuration but is hidden from the language model.' },
    type: { type: 'string', enum: ['function'], default: 'function', description: 'Always `function`.' },
    function: {
      type: 'object',
      additionalProperties: false,
      required: ['name'],
      description: 'What the language model sees.',
      properties: {
        name: { type: 'string', minLength: 1, maxLength: AGENT_LIMITS.toolNameMaxLength, pattern: TOOL_NAME_PATTERN, description: 'Function name, unique per agent (`end_call` is reserved for the built-in hang-up).' },
        description: text(AGENT_LIMITS.toolDescriptionMaxLength, 'When and why to call it (up to 1024 characters).'),
        parameters: { type: 'object', description: 'JSON Schema of the arguments; only `properties` and `required` are kept.' },
      },
    },
    delivery: {
      type: 'object',
      additionalProperties: false,
      required: ['mode'],
      description: 'Where calls go.',
      properties: {
        mode: { type: 'string', enum: ['client', 'webhook'], description: '`client`: to the browser page (widget event); `webhook`: an HTTP POST to `url`.' },
        url: { type: 'string', minLength: 1, maxLength: AGENT_LIMITS.toolUrlMaxLength, description: 'Webhook URL (webhook mode).' },
        wait_for_response: { type: 'boolean', description: "Webhook mode: whether the language model waits for the webhook's answer as the call's result." },
      },
    },
  },
};

export const toolSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    tool_id: described(uuid, 'Id of the tool (server-assigned).'),
    enabled: { type: 'boolean', description: 'A disabled tool keeps its configuration but is hidden from the language model.' },
    type: { type: 'string', description: 'Always `function`.' },
    function: {
      type: 'object',
      description: 'What the language model sees.',
      properties: {
        name: { type: 'string', description: 'Function name, unique per agent.' },
        description: { type: 'string', description: 'When and why to call it.' },
        parameters: {
          type: 'object',
          description: 'JSON Schema of the arguments (only `properties` and `required` are kept).',
          properties: {
            properties: { type: 'object', description: 'Argument schemas by name.' },
            required: { type: 'array', items: { type: 'string' }, description: 'Names of the required arguments.' },
          },
        },
      },
    },
    delivery: {
      description: 'Where calls go: the browser page (`client`) or a webhook.',
      oneOf: [
        { type: 'object', required: ['mode'], additionalProperties: false, properties: { mode: { const: 'client', description: 'Calls go to the browser page.' } } },
        {
          type: 'object', required: ['mode', 'url', 'wait_for_response'], additionalProperties: false,
          properties: {
            mode: { const: 'webhook', description: 'Calls are POSTed to `url`.' },
            url: { type: 'string', description: 'Webhook URL.' },
            wait_for_response: { type: 'boolean', description: "Whether the language model waits for the webhook's answer." },
          },
        },
      ],
    },
  },
});

/** Every field PATCH accepts (all optional); POST accepts the same plus preset_id (decision). */
export const agentWritableProperties: Record<string, JsonSchema> = {
  title: { type: 'string', minLength: 1, maxLength: AGENT_LIMITS.titleMaxLength, description: AGENT_FIELD.title },
  description: nullableText(AGENT_LIMITS.descriptionMaxLength, AGENT_FIELD.description),
  mode: { type: 'string', enum: ['svc', 'third_party'], description: AGENT_FIELD.mode },
  face_id: { type: ['string', 'null'], format: 'uuid', description: AGENT_FIELD.face_id },
  language: { type: 'string', enum: AGENT_LANGUAGES, description: AGENT_FIELD.language },
  system_prompt: nullableText(AGENT_LIMITS.systemPromptMaxLength, AGENT_FIELD.system_prompt),
  tts_provider: { type: 'string', minLength: 1, maxLength: 100, pattern: '^[a-z0-9][a-z0-9_-]*$', description: AGENT_FIELD.tts_provider },
  voice_id: nullableText(AGENT_LIMITS.voiceIdMaxLength, AGENT_FIELD.voice_id),
  behaviour: { ...behaviourSchema, description: `${AGENT_FIELD.behaviour} PATCH merges it key by key.` },
  advanced: { ...advancedSchema, description: `${AGENT_FIELD.advanced} PATCH merges it key by key.` },
  sts_provider: { type: ['string', 'null'], minLength: 1, maxLength: AGENT_LIMITS.stsProviderMaxLength, description: AGENT_FIELD.sts_provider },
  sts_api_key: { ...nullableText(AGENT_LIMITS.stsApiKeyMaxLength, AGENT_FIELD.sts_api_key), writeOnly: true },
  sts_config_id: nullableText(AGENT_LIMITS.stsConfigIdMaxLength, AGENT_FIELD.sts_config_id),
  provider_config: { type: 'object', description: AGENT_FIELD.provider_config },
  preview_url: nullableText(AGENT_LIMITS.previewUrlMaxLength, AGENT_FIELD.preview_url),
  session_limit_seconds: { type: 'integer', minimum: AGENT_LIMITS.sessionLimitSeconds.min, maximum: AGENT_LIMITS.sessionLimitSeconds.max, description: AGENT_FIELD.session_limit_seconds },
  max_concurrency: {
    type: 'integer',
    anyOf: [{ const: -1 }, { minimum: AGENT_LIMITS.maxConcurrency.min, maximum: AGENT_LIMITS.maxConcurrency.max }],
    description: AGENT_FIELD.max_concurrency,
  },
  starts_conversation: { type: 'boolean', description: AGENT_FIELD.starts_conversation },
  auth_enabled: { type: 'boolean', description: `${AGENT_FIELD.auth_enabled} Turning it on generates the secret, returned once as \`auth_secret\`.` },
  allowed_hostnames: {
    type: ['array', 'null'],
    maxItems: AGENT_LIMITS.maxAllowedHostnames,
    items: { type: 'string', minLength: 1, maxLength: AGENT_LIMITS.hostnameMaxLength },
    description: AGENT_FIELD.allowed_hostnames,
  },
  tools: { type: 'array', maxItems: AGENT_LIMITS.maxTools, items: toolInputSchema, description: `${AGENT_FIELD.tools} Replaces the list; tools are matched by \`function.name\`.` },
};

export const createAgentBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['title'],
  properties: { ...agentWritableProperties, preset_id: described(uuid, 'An agent of your organization or a template agent whose fields and tools are copied first; the body\'s fields override them.') },
};

export const patchAgentBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: agentWritableProperties,
};

export const agentStatusBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['status'],
  properties: { status: { type: 'string', enum: ['published', 'unpublished'], description: AGENT_FIELD.status } },
};

export const agentSummarySchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    agent_id: described(uuid, AGENT_FIELD.agent_id),
    organization_id: described(uuid, AGENT_FIELD.organization_id),
    created_by: { type: 'string', description: AGENT_FIELD.created_by },
    title: { type: 'string', description: AGENT_FIELD.title },
    description: { type: ['string', 'null'], description: AGENT_FIELD.description },
    mode: { type: 'string', enum: ['svc', 'third_party'], description: AGENT_FIELD.mode },
    status: { type: 'string', enum: ['published', 'unpublished'], description: AGENT_FIELD.status },
    face_id: { type: ['string', 'null'], description: AGENT_FIELD.face_id },
    created_at: described(dateTime, AGENT_FIELD.created_at),
    updated_at: described(dateTime, AGENT_FIELD.updated_at),
  },
});

export const agentSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    ...(agentSummarySchema.properties as Record<string, JsonSchema>),
    language: { type: 'string', description: AGENT_FIELD.language },
    system_prompt: { type: ['string', 'null'], description: AGENT_FIELD.system_prompt },
    tts_provider: { type: 'string', description: AGENT_FIELD.tts_provider },
    voice_id: { type: ['string', 'null'], description: AGENT_FIELD.voice_id },
    behaviour: { type: 'object', description: `${AGENT_FIELD.behaviour} Fields as in the request body.` },
    advanced: { type: 'object', description: AGENT_FIELD.advanced },
    sts_provider: { type: ['string', 'null'], description: AGENT_FIELD.sts_provider },
    sts_config_id: { type: ['string', 'null'], description: AGENT_FIELD.sts_config_id },
    sts_api_key_set: { type: 'boolean', description: AGENT_FIELD.sts_api_key_set },
    provider_config: { type: 'object', description: AGENT_FIELD.provider_config },
    preview_url: { type: ['string', 'null'], description: AGENT_FIELD.preview_url },
    starts_conversation: { type: 'boolean', description: AGENT_FIELD.starts_conversation },
    session_limit_seconds: { type: 'integer', description: AGENT_FIELD.session_limit_seconds },
    max_concurrency: { type: 'integer', description: AGENT_FIELD.max_concurrency },
    auth_enabled: { type: 'boolean', description: AGENT_FIELD.auth_enabled },
    auth_secret_set: { type: 'boolean', description: AGENT_FIELD.auth_secret_set },
    auth_secret: { type: ['string', 'null'], description: 'The auth secret in plaintext, only in the response that generated it (creation with auth_enabled, the PATCH that first enables it, or POST /agents/{agent_id}/rotate-auth-secret); null otherwise.' },
    allowed_hostnames: { type: ['array', 'null'], items: { type: 'string' }, description: AGENT_FIELD.allowed_hostnames },
    tools: { type: 'array', items: toolSchema, description: AGENT_FIELD.tools },
  },
});

/** Decision: the public agent record read by the widget (`GET /v1/public/agents/{agent_id}`). */
export const publicAgentSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    agent_id: described(uuid, AGENT_FIELD.agent_id),
    title: { type: 'string', description: AGENT_FIELD.title },
    description: { type: ['string', 'null'], description: AGENT_FIELD.description },
    mode: { type: 'string', description: AGENT_FIELD.mode },
    status: { type: 'string', description: AGENT_FIELD.status },
    language: { type: 'string', description: AGENT_FIELD.language },
    face_id: { type: ['string', 'null'], description: AGENT_FIELD.face_id },
    preview_url: { type: ['string', 'null'], description: 'Preview image or video URL; asset ids are resolved to signed URLs.' },
    starts_conversation: { type: 'boolean', description: AGENT_FIELD.starts_conversation },
    session_limit_seconds: { type: 'integer', description: AGENT_FIELD.session_limit_seconds },
    auth_enabled: { type: 'boolean', description: AGENT_FIELD.auth_enabled },
  },
});

export const agentCallSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    call_id: described(uuid, 'Id of the call record.'),
    agent_id: described(uuid, 'The agent called.'),
    organization_id: described(uuid, AGENT_FIELD.organization_id),
    session_id: described(uuid, 'The session this call belongs to.'),
    applied_session_limit_seconds: { type: 'integer', description: 'Session limit in force for this call, in seconds.' },
    client_user_ref: { type: ['string', 'null'], description: 'Reference of the end user the client passed when starting the session, or null.' },
    started_at: described(dateTime, 'Start of the call.'),
    ended_at: { type: ['string', 'null'], format: 'date-time', description: 'End of the call, null while active.' },
    status: { type: 'string', enum: ['active', 'completed', 'failed'], description: '`active` while the session runs, then `completed` or `failed`.' },
    termination_reason: { type: ['string', 'null'], description: 'Why the call ended (the Session API vocabulary, docs/sessions.md), null while active.' },
    failure_reason: { type: ['string', 'null'], description: 'What failed (the Session API vocabulary, docs/sessions.md), null while active.' },
    participant_count: { type: 'integer', description: 'Participants seen in the room.' },
    metadata: { type: 'object', description: 'Free-form data recorded with the call.' },
  },
});

export const providerDescriptorSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    slug: { type: 'string', description: 'Provider slug, the value of `sts_provider`.' },
    label: { type: 'string', description: 'Display name.' },
    required_persisted: { type: 'array', items: { type: 'string' }, description: '`provider_config` fields that must be stored on the agent.' },
    optional_persisted: { type: 'array', items: { type: 'string' }, description: '`provider_config` fields that may be stored on the agent.' },
    session_fields: { type: 'array', items: { type: 'string' }, description: 'Fields supplied per session.' },
    status: { type: 'string', description: 'Availability of the provider on this server.' },
  },
});

export const verifyProviderResponse: JsonSchema = {
  type: 'object',
  required: ['valid', 'provider'],
  properties: {
    valid: { type: 'boolean', description: "Whether the provider accepted the agent's stored key and configuration." },
    provider: { type: 'string', description: 'The provider checked (`sts_provider`).' },
    error: { type: 'string', description: "The provider's refusal, when not valid." },
  },
};

export { nullable };
