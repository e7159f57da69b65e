import { randomUUID } from 'node:crypto';
import type { Db } from '../db/connect.ts';

/** The shared organization that owns template model configs and assets (readable by all). */
export const TEMPLATE_ORGANIZATION = {
  organization_id: '00000000-0000-4000-8000-000000000001',
  name: 'svc-templates',
} as const;

export interface OrganizationRow {
  organization_id: string;
  name: string;
  is_template: boolean;
  created_at: Date;
}

export class Organizations {
  constructor(private readonly db: Db) {}

  async ensureTemplate(): Promise<void> {
    await this.db('organizations')
      .insert({ ...TEMPLATE_ORGANIZATION, is_template: true })
      .onConflict('organization_id')
      .ignore();
  }

  async findByName(name: string): Promise<OrganizationRow | undefined> {
    return this.db<OrganizationRow>('organizations').where({ name }).first();
  }

  /** Returns the organization named `name`, creating it when absent. */
  async findOrCreate(name: string): Promise<OrganizationRow> {
    const existing = await this.findByName(name);
    if (existing) return existing;
    await this.db('organizations').insert({ organization_id: randomUUID(), name }).onConflict('name').ignore();
    return (await this.findByName(name))!;
  }

  /** Organizations other than the template one (the first-start demo check). */
  async countCustomers(): Promise<number> {
    const row = await this.db('organizations').where({ is_template: false }).count('* as n').first();
    return Number(Object.values(row ?? { n: 0 })[0]);
  }
}
