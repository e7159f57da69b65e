import type { Registry } from '../../core/registry.ts';
import type { Db } from '../db/connect.ts';
import { isoRequired } from '../db/row-values.ts';
import { ApiError } from '../http/api-error.ts';
import { envelope, type ListEnvelope, type Page } from '../http/pagination.ts';

export interface ModelVariant {
  model_variant_id: string;
  model_id: string;
  title: string;
  description: Record<string, string>;
  preview_media_url: string | null;
  configuration_schema: Record<string, unknown>;
  tags: string[];
  status: string;
  created_at: string;
  updated_at: string;
}

/** What a face plugin publishes in its registry descriptor (see plugins/face/variants.ts). */
export interface VariantDescriptor {
  model_variant_id: string;
  model_id: string;
  title: string;
  description?: Record<string, string>;
  configuration_schema?: Record<string, unknown>;
  status: string;
  tags?: string[];
  preview_media_url?: string | null;
}

export interface VariantFilter {
  model_id?: string;
  status?: string;
  tags?: string;
}

const toVariant = (row: any): ModelVariant => ({
  model_variant_id: row.model_variant_id,
  model_id: row.model_id,
  title: row.title,
  description: row.description ?? {},
  preview_media_url: row.preview_media_url ?? null,
  configuration_schema: row.configuration_schema ?? {},
  tags: row.tags ?? [],
  status: row.status,
  created_at: isoRequired(row.created_at),
  updated_at: isoRequired(row.updated_at),
});

export function isVariantDescriptor(value: unknown): value is VariantDescriptor {
  const d = value as VariantDescriptor;
  return !!d && typeof d.model_variant_id === 'string' && typeof d.model_id === 'string' && typeof d.title === 'string' && typeof d.status === 'string';
}

/** The read-only catalogue. API-key callers only ever see `public` variants (spec). */
export class ModelVariants {
  constructor(private readonly db: Db) {}

  /** Upserts the descriptors every `face` plugin publishes; returns the ids seeded. */
  async seedFromRegistry(registry: Registry): Promise<string[]> {
    const seeded: string[] = [];
    for (const entry of registry.list('face')) {
      if (!isVariantDescriptor(entry.descriptor)) continue;
      const d = entry.descriptor;
      await this.db('model_variants')
        .insert({
          model_variant_id: d.model_variant_id,
          model_id: d.model_id,
          title: d.title,
          description: JSON.stringify(d.description ?? {}),
          preview_media_url: d.preview_media_url ?? null,
          configuration_schema: JSON.stringify(d.configuration_schema ?? {}),
          tags: JSON.stringify(d.tags ?? []),
          status: d.status,
        })
        .onConflict('model_variant_id')
        .merge(['model_id', 'title', 'description', 'preview_media_url', 'configuration_schema', 'tags', 'status', 'updated_at']);
      seeded.push(d.model_variant_id);
    }
    return seeded;
  }

  async list(filter: VariantFilter, page: Page, publicOnly: boolean): Promise<ListEnvelope<ModelVariant>> {
    const query = this.db('model_variants');
    if (filter.model_id) query.where('model_id', filter.model_id);
    if (publicOnly) query.where('status', 'public');
    else if (filter.status) query.where('status', filter.status);
    const tags = (filter.tags ?? '').split(',').map((t) => t.trim()).filter(Boolean);
    if (tags.length) query.whereRaw('tags @> ?::jsonb', [JSON.stringify(tags)]);
    const [rows, total] = await Promise.all([
      query.clone().orderBy('model_variant_id').limit(page.limit).offset(page.offset),
      query.clone().count('* as n').first(),
    ]);
    return envelope(rows.map(toVariant), page, Number(total?.n ?? 0));
  }

  /** Returns the variant; 404 when unknown, or when not `public` and `publicOnly`. */
  async get(id: string, publicOnly: boolean): Promise<ModelVariant> {
    const row = await this.db('model_variants').where('model_variant_id', id).first();
    if (!row || (publicOnly && row.status !== 'public')) {
      throw new ApiError('model_variant_not_found', `model variant ${id} not found`, { model_variant_id: id });
    }
    return toVariant(row);
  }

  /** The public metadata shape (decision; see docs/decisions-rest.md). */
  async getPublic(id: string): Promise<Record<string, unknown>> {
    const v = await this.get(id, true);
    const res = /(\d+)x(\d+)/.exec(v.description.max_resolution ?? '');
    const fps = Number(v.description.frame_rate);
    return {
      model_variant_id: v.model_variant_id,
      model_id: v.model_id,
      title: v.title,
      description: v.description,
      preview_media_url: v.preview_media_url,
      tags: v.tags,
      frame_rate: Number.isInteger(fps) && fps > 0 ? fps : null,
      max_frame_size: res ? { width: Number(res[1]), height: Number(res[2]) } : null,
    };
  }
}
