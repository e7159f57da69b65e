import { JsonText } from './json-text.ts';

/** Spec "Limits": list page size and offset. */
export const PAGINATION = {
  defaultLimit: 20,
  maxLimit: 100,
  /** Decision: offsets fit a 32-bit integer (no list is that long; keeps SQL parameters in range). */
  maxOffset: 2_147_483_647,
} as const;

export const paginationQueryProperties = {
  limit: { type: 'integer', minimum: 1, maximum: PAGINATION.maxLimit, default: PAGINATION.defaultLimit, description: 'Items in this page (1 to 100).' },
  offset: { type: 'integer', minimum: 0, maximum: PAGINATION.maxOffset, default: 0, description: 'Items to skip.' },
} as const;

export interface Page {
  limit: number;
  offset: number;
}

export interface ListEnvelope<T> {
  data: T[];
  pagination: { limit: number; offset: number; total_items: number };
}

export function envelope<T>(data: T[], page: Page, totalItems: number): ListEnvelope<T> {
  return { data, pagination: { limit: page.limit, offset: page.offset, total_items: totalItems } };
}

/** The same envelope around a page already serialised as a JSON array (see `JsonText`). */
export function envelopeText<T>(dataJson: string, page: Page, totalItems: number): JsonText<ListEnvelope<T>> {
  const pagination: ListEnvelope<T>['pagination'] = { limit: page.limit, offset: page.offset, total_items: totalItems };
  return new JsonText(`{"data":${dataJson},"pagination":${JSON.stringify(pagination)}}`);
}
