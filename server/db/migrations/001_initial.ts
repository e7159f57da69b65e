import type { Knex } from 'knex';

/**
 * The whole REST data model. Tables documented in docs/decisions-rest.md; `agent_sessions`
 * and `agent_calls` are shared with the Session API.
 */
export async function up(db: Knex): Promise<void> {
  await db.schema.createTable('organizations', (t) => {
    t.uuid('organization_id').primary();
    t.text('name').notNullable().unique();
    t.boolean('is_template').notNullable().defaultTo(false);
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
  });

  await db.schema.createTable('api_keys', (t) => {
    t.uuid('api_key_id').primary();
    t.uuid('organization_id').notNullable().references('organization_id').inTable('organizations').onDelete('CASCADE');
    t.text('name').notNullable();
    t.text('prefix').notNullable();
    t.text('key_hash').notNullable().unique();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
    t.timestamp('revoked_at', { useTz: true });
    t.index(['organization_id']);
  });

  await db.schema.createTable('model_variants', (t) => {
    t.text('model_variant_id').primary();
    t.text('model_id').notNullable();
    t.text('title').notNullable();
    t.jsonb('description').notNullable().defaultTo('{}');
    t.text('preview_media_url');
    t.jsonb('configuration_schema').notNullable().defaultTo('{}');
    t.jsonb('tags').notNullable().defaultTo('[]');
    t.text('status').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
    t.unique(['model_id', 'title']);
  });

  await db.schema.createTable('model_configs', (t) => {
    t.uuid('model_config_id').primary();
    t.uuid('organization_id').notNullable().references('organization_id').inTable('organizations').onDelete('CASCADE');
    t.text('model_id').notNullable();
    t.text('model_variant_id').notNullable().references('model_variant_id').inTable('model_variants');
    t.text('created_by').notNullable();
    t.text('title').notNullable();
    t.jsonb('model_configurations').notNullable().defaultTo('{}');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
    t.unique(['organization_id', 'title']);
  });

  await db.schema.createTable('upload_sessions', (t) => {
    t.uuid('asset_id').primary();
    t.text('upload_id').notNullable();
    t.uuid('organization_id').notNullable().references('organization_id').inTable('organizations').onDelete('CASCADE');
    t.text('created_by').notNullable();
    t.text('name').notNullable();
    t.text('category').notNullable();
    t.text('content_type');
    t.bigInteger('size_bytes');
    t.text('storage_key').notNullable();
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
  });

  await db.schema.createTable('assets', (t) => {
    t.uuid('asset_id').primary();
    t.uuid('organization_id').notNullable().references('organization_id').inTable('organizations').onDelete('CASCADE');
    t.text('created_by').notNullable();
    t.text('name').notNullable();
    t.text('category').notNullable();
    t.text('content_type');
    t.bigInteger('size_bytes').notNullable();
    t.text('etag').notNullable();
    t.text('storage_key').notNullable();
    /** Derived data written by plugins after finalize (e.g. face landmarks). */
    t.jsonb('analysis').notNullable().defaultTo('{}');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
    t.index(['organization_id', 'created_at']);
  });

  await db.schema.createTable('agents', (t) => {
    t.uuid('agent_id').primary();
    t.uuid('organization_id').notNullable().references('organization_id').inTable('organizations').onDelete('CASCADE');
    t.text('created_by').notNullable();
    t.text('title').notNullable();
    t.text('description');
    t.text('mode').notNullable();
    t.text('status').notNullable();
    t.uuid('face_id');
    t.text('language').notNullable();
    t.text('system_prompt');
    t.text('tts_provider').notNullable();
    t.text('voice_id');
    t.jsonb('behaviour').notNullable().defaultTo('{}');
    t.jsonb('advanced').notNullable().defaultTo('{}');
    t.text('sts_provider');
    t.text('sts_config_id');
    t.text('sts_api_key_encrypted');
    t.jsonb('provider_config').notNullable().defaultTo('{}');
    t.text('preview_url');
    t.boolean('starts_conversation').notNullable();
    t.integer('session_limit_seconds').notNullable();
    t.integer('max_concurrency').notNullable();
    t.boolean('auth_enabled').notNullable();
    t.text('auth_secret_encrypted');
    t.jsonb('allowed_hostnames');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
    t.index(['organization_id', 'created_at']);
    t.index(['face_id']);
  });

  await db.schema.createTable('agent_tools', (t) => {
    t.uuid('tool_id').primary();
    t.uuid('agent_id').notNullable().references('agent_id').inTable('agents').onDelete('CASCADE');
    t.integer('position').notNullable();
    t.boolean('enabled').notNullable();
    t.text('type').notNullable();
    t.text('name').notNullable();
    t.text('description');
    t.jsonb('parameters').notNullable();
    t.jsonb('delivery').notNullable();
    t.unique(['agent_id', 'name']);
  });

  // Live sessions: a row is active while lease_expires_at is in the future (renewed by heartbeat).
  await db.schema.createTable('agent_sessions', (t) => {
    t.uuid('session_id').primary();
    t.uuid('agent_id').notNullable().references('agent_id').inTable('agents').onDelete('CASCADE');
    t.uuid('organization_id').notNullable();
    t.text('room').notNullable().unique();
    t.text('client_user_ref');
    t.integer('applied_session_limit_seconds').notNullable();
    t.timestamp('started_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
    t.timestamp('lease_expires_at', { useTz: true }).notNullable();
    t.jsonb('metadata').notNullable().defaultTo('{}');
    t.index(['agent_id', 'lease_expires_at']);
  });

  await db.schema.createTable('agent_calls', (t) => {
    t.uuid('call_id').primary();
    t.uuid('agent_id').notNullable().references('agent_id').inTable('agents').onDelete('CASCADE');
    t.uuid('organization_id').notNullable();
    t.uuid('session_id').notNullable().unique();
    t.integer('applied_session_limit_seconds').notNullable();
    t.text('client_user_ref');
    t.timestamp('started_at', { useTz: true }).notNullable();
    t.timestamp('ended_at', { useTz: true });
    t.text('status').notNullable();
    t.text('termination_reason');
    t.text('failure_reason');
    t.integer('participant_count').notNullable().defaultTo(0);
    t.jsonb('metadata').notNullable().defaultTo('{}');
    t.index(['agent_id', 'started_at']);
  });

  await db.schema.createTable('generation_jobs', (t) => {
    t.uuid('job_id').primary();
    t.uuid('organization_id').notNullable().references('organization_id').inTable('organizations').onDelete('CASCADE');
    t.text('created_by').notNullable();
    t.text('generator').notNullable();
    t.uuid('source_asset_id').notNullable();
    t.text('reference_template');
    t.text('model_variant_id');
    t.uuid('target_model_config_id');
    t.text('status').notNullable();
    t.jsonb('result');
    t.text('error');
    t.timestamp('created_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
    t.timestamp('updated_at', { useTz: true }).notNullable().defaultTo(db.fn.now());
  });
}

export async function down(db: Knex): Promise<void> {
  for (const table of ['generation_jobs', 'agent_calls', 'agent_sessions', 'agent_tools', 'agents', 'assets', 'upload_sessions', 'model_configs', 'model_variants', 'api_keys', 'organizations']) {
    await db.schema.dropTableIfExists(table);
  }
}
