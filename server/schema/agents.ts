import { dateTime, nullable, uuid, responseShape } from './common.ts';
import type { JsonSchema } from '../http/api-routes.ts';

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
  /** Decision: provider_config serialised size cap. */
  providerConfigMaxBytes: 16_384,
} as const;

/** Decision: spoken language codes (ISO 639-1) supported by the speech pipeline. */
export const AGENT_LANGUAGES = ['en', 'es', 'fr', 'de', 'it', 'pt', 'nl', 'pl', 'sv', 'da', 'no', 'fi', 'cs', 'ru', 'uk', 'tr', 'ar', 'hi', 'ja', 'ko', 'zh'] as const;

/** Decision: `verbatim` speaks the text as written; `generated` lets the language model phrase it. */
export const BEHAVIOUR_MODES = ['verbatim', 'generated'] as const;

const text = (max: number) => ({ type: 'string', maxLength: max });
const nullableText = (max: number) => ({ type: ['string', 'null'], maxLength: max });

export const behaviourSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    greeting: text(AGENT_LIMITS.behaviourTextMaxLength),
    greeting_reference: text(AGENT_LIMITS.behaviourTextMaxLength),
    greeting_mode: { type: 'string', enum: BEHAVIOUR_MODES },
    nudge_message: text(AGENT_LIMITS.behaviourTextMaxLength),
    nudge_reference: text(AGENT_LIMITS.behaviourTextMaxLength),
    nudge_mode: { type: 'string', enum: BEHAVIOUR_MODES },
    farewell_message: text(AGENT_LIMITS.behaviourTextMaxLength),
    farewell_reference: text(AGENT_LIMITS.behaviourTextMaxLength),
    farewell_mode: { type: 'string', enum: BEHAVIOUR_MODES },
    max_conversation_duration_seconds: { type: 'integer', minimum: 1, maximum: 86_400 },
    inactivity_nudge_seconds: { type: 'integer', minimum: 0, maximum: 3600, description: '0 disables the nudge.' },
    allow_interruption: { type: 'boolean' },
  },
};

export const advancedSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    max_video_source_dimension: { type: 'integer', minimum: 64, maximum: 4096 },
    llm_max_tokens: { type: 'integer', minimum: 1, maximum: 32_768 },
  },
};

export const TOOL_NAME_PATTERN = '^[a-zA-Z0-9_-]+$';

export const toolInputSchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['function', 'delivery'],
  properties: {
    tool_id: { ...uuid, description: 'Ignored on input; tools are matched by function.name.' },
    enabled: { type: 'boolean', default: true },
    type: { type: 'string', enum: ['function'], default: 'function' },
    function: {
      type: 'object',
      additionalProperties: false,
      required: ['name'],
      properties: {
        name: { type: 'string', minLength: 1, maxLength: AGENT_LIMITS.toolNameMaxLength, pattern: TOOL_NAME_PATTERN },
        description: text(AGENT_LIMITS.toolDescriptionMaxLength),
        parameters: { type: 'object', description: 'JSON Schema; only `properties` and `required` are kept.' },
      },
    },
    delivery: {
      type: 'object',
      additionalProperties: false,
      required: ['mode'],
      properties: {
        mode: { type: 'string', enum: ['client', 'webhook'] },
        url: { type: 'string', minLength: 1, maxLength: AGENT_LIMITS.toolUrlMaxLength },
        wait_for_response: { type: 'boolean' },
      },
    },
  },
};

export const toolSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    tool_id: uuid,
    enabled: { type: 'boolean' },
    type: { type: 'string' },
    function: {
      type: 'object',
      properties: {
        name: { type: 'string' },
        description: { type: 'string' },
        parameters: { type: 'object', properties: { properties: { type: 'object' }, required: { type: 'array', items: { type: 'string' } } } },
      },
    },
    delivery: {
      oneOf: [
        { type: 'object', required: ['mode'], additionalProperties: false, properties: { mode: { const: 'client' } } },
        {
          type: 'object', required: ['mode', 'url', 'wait_for_response'], additionalProperties: false,
          properties: { mode: { const: 'webhook' }, url: { type: 'string' }, wait_for_response: { type: 'boolean' } },
        },
      ],
    },
  },
});

/** Every field PATCH accepts (all optional); POST accepts the same plus preset_id (decision). */
export const agentWritableProperties: Record<string, JsonSchema> = {
  title: { type: 'string', minLength: 1, maxLength: AGENT_LIMITS.titleMaxLength },
  description: nullableText(AGENT_LIMITS.descriptionMaxLength),
  mode: { type: 'string', enum: ['svc', 'third_party'] },
  face_id: { type: ['string', 'null'], format: 'uuid' },
  language: { type: 'string', enum: AGENT_LANGUAGES },
  system_prompt: nullableText(AGENT_LIMITS.systemPromptMaxLength),
  tts_provider: { type: 'string', minLength: 1, maxLength: 100, pattern: '^[a-z0-9][a-z0-9_-]*$' },
  voice_id: nullableText(AGENT_LIMITS.voiceIdMaxLength),
  behaviour: behaviourSchema,
  advanced: advancedSchema,
  sts_provider: { type: ['string', 'null'], minLength: 1, maxLength: AGENT_LIMITS.stsProviderMaxLength },
  sts_api_key: { ...nullableText(AGENT_LIMITS.stsApiKeyMaxLength), writeOnly: true },
  sts_config_id: nullableText(AGENT_LIMITS.stsConfigIdMaxLength),
  provider_config: { type: 'object' },
  preview_url: nullableText(AGENT_LIMITS.previewUrlMaxLength),
  session_limit_seconds: { type: 'integer', minimum: AGENT_LIMITS.sessionLimitSeconds.min, maximum: AGENT_LIMITS.sessionLimitSeconds.max },
  max_concurrency: {
    type: 'integer',
    anyOf: [{ const: -1 }, { minimum: AGENT_LIMITS.maxConcurrency.min, maximum: AGENT_LIMITS.maxConcurrency.max }],
    description: '-1 (unbounded) or 1 to 100',
  },
  starts_conversation: { type: 'boolean' },
  auth_enabled: { type: 'boolean' },
  allowed_hostnames: {
    type: ['array', 'null'],
    maxItems: AGENT_LIMITS.maxAllowedHostnames,
    items: { type: 'string', minLength: 1, maxLength: AGENT_LIMITS.hostnameMaxLength },
  },
  tools: { type: 'array', maxItems: AGENT_LIMITS.maxTools, items: toolInputSchema },
};

export const createAgentBody: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  required: ['title'],
  properties: { ...agentWritableProperties, preset_id: uuid },
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
  properties: { status: { type: 'string', enum: ['published', 'unpublished'] } },
};

export const agentSummarySchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    agent_id: uuid,
    organization_id: uuid,
    created_by: { type: 'string' },
    title: { type: 'string' },
    description: { type: ['string', 'null'] },
    mode: { type: 'string', enum: ['svc', 'third_party'] },
    status: { type: 'string', enum: ['published', 'unpublished'] },
    face_id: { type: ['string', 'null'] },
    created_at: dateTime,
    updated_at: dateTime,
  },
});

export const agentSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    ...(agentSummarySchema.properties as Record<string, JsonSchema>),
    language: { type: 'string' },
    system_prompt: { type: ['string', 'null'] },
    tts_provider: { type: 'string' },
    voice_id: { type: ['string', 'null'] },
    behaviour: { type: 'object' },
    advanced: { type: 'object' },
    sts_provider: { type: ['string', 'null'] },
    sts_config_id: { type: ['string', 'null'] },
    sts_api_key_set: { type: 'boolean' },
    provider_config: { type: 'object' },
    preview_url: { type: ['string', 'null'] },
    starts_conversation: { type: 'boolean' },
    session_limit_seconds: { type: 'integer' },
    max_concurrency: { type: 'integer' },
    auth_enabled: { type: 'boolean' },
    auth_secret_set: { type: 'boolean' },
    auth_secret: { type: ['string', 'null'], description: 'Plaintext; only in the response that generated it.' },
    allowed_hostnames: { type: ['array', 'null'], items: { type: 'string' } },
    tools: { type: 'array', items: toolSchema },
  },
});

/** Decision: the public agent record read by the widget (`GET /v1/public/agents/{agent_id}`). */
export const publicAgentSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    agent_id: uuid,
    title: { type: 'string' },
    description: { type: ['string', 'null'] },
    mode: { type: 'string' },
    status: { type: 'string' },
    language: { type: 'string' },
    face_id: { type: ['string', 'null'] },
    preview_url: { type: ['string', 'null'], description: 'Asset ids resolved to signed URLs.' },
    starts_conversation: { type: 'boolean' },
    session_limit_seconds: { type: 'integer' },
    auth_enabled: { type: 'boolean' },
  },
});

export const agentCallSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    call_id: uuid,
    agent_id: uuid,
    organization_id: uuid,
    session_id: uuid,
    applied_session_limit_seconds: { type: 'integer' },
    client_user_ref: { type: ['string', 'null'] },
    started_at: dateTime,
    ended_at: { type: ['string', 'null'], format: 'date-time' },
    status: { type: 'string', enum: ['active', 'completed', 'failed'] },
    termination_reason: { type: ['string', 'null'] },
    failure_reason: { type: ['string', 'null'] },
    participant_count: { type: 'integer' },
    metadata: { type: 'object' },
  },
});

export const providerDescriptorSchema: JsonSchema = responseShape({
  type: 'object',
  properties: {
    slug: { type: 'string' },
    label: { type: 'string' },
    required_persisted: { type: 'array', items: { type: 'string' } },
    optional_persisted: { type: 'array', items: { type: 'string' } },
    session_fields: { type: 'array', items: { type: 'string' } },
    status: { type: 'string' },
  },
});

export const verifyProviderResponse: JsonSchema = {
  type: 'object',
  required: ['valid', 'provider'],
  properties: { valid: { type: 'boolean' }, provider: { type: 'string' }, error: { type: 'string' } },
};

export { nullable };
