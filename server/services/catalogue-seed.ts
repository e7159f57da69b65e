import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { Registry } from '../../core/registry.ts';
import type { Db } from '../db/connect.ts';
import type { Assets } from './assets.ts';
import { ModelVariants } from './model-variants.ts';
import { Organizations, TEMPLATE_ORGANIZATION } from './organizations.ts';

/** The default template face: a NASA public-domain astronaut portrait shipped with the server. */
export const TEMPLATE_FACE_ASSET = {
  asset_id: '00000000-0000-4000-8000-0000000000a1',
  name: 'astronaut-512.png',
  category: 'image',
  content_type: 'image/png',
  file: new URL('../assets/astronaut-512.png', import.meta.url),
} as const;

/**
 * Idempotent start-up seeding: the template organization, the variant catalogue from the
 * registered face plugins, the default face asset, and one template configuration per public
 * face variant (pointing at that face when the variant's schema takes a reference image).
 */
export async function seedCatalogue(db: Db, registry: Registry, assets: Assets): Promise<{ variants: string[]; templateConfigs: string[] }> {
  await new Organizations(db).ensureTemplate();
  const variants = await new ModelVariants(db).seedFromRegistry(registry);
  const org = TEMPLATE_ORGANIZATION.organization_id;
  const haveFace = await db('assets').where('asset_id', TEMPLATE_FACE_ASSET.asset_id).first('asset_id');
  const faceBytes = await readFile(TEMPLATE_FACE_ASSET.file);
  if (!haveFace) {
    await assets.createFromBytes(org, 'system', { ...TEMPLATE_FACE_ASSET, data: faceBytes });
  } else {
    // The row is shared by every process on the database, the object only by those sharing this
    // storage: a process with storage of its own serves the template face from the package.
    await assets.restoreObject(TEMPLATE_FACE_ASSET.asset_id, faceBytes);
    await assets.ensureAnalysed(TEMPLATE_FACE_ASSET.asset_id);
  }
  const templateConfigs: string[] = [];
  const publicVariants = await db('model_variants').whereIn('model_variant_id', variants).where('status', 'public');
  for (const variant of publicVariants) {
    const existing = await db('model_configs').where({ organization_id: org, model_variant_id: variant.model_variant_id }).first('model_config_id');
    if (existing) {
      templateConfigs.push(existing.model_config_id);
      continue;
    }
    const takesImage = !!variant.configuration_schema?.properties?.reference_image_asset_id;
    const id = randomUUID();
    await db('model_configs')
      .insert({
        model_config_id: id,
        organization_id: org,
        model_id: variant.model_id,
        model_variant_id: variant.model_variant_id,
        created_by: 'system',
        title: variant.title,
        model_configurations: JSON.stringify(takesImage ? { reference_image_asset_id: TEMPLATE_FACE_ASSET.asset_id } : {}),
      })
      .onConflict(['organization_id', 'title'])
      .ignore();
    templateConfigs.push(id);
  }
  return { variants, templateConfigs };
}
