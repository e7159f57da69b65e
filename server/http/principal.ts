/** Who is calling an authenticated route: an API key of one organization. */
export interface Principal {
  organizationId: string;
  apiKeyId: string;
  /** Value stored in `created_by` (spec: `api_key:<id>`). */
  createdBy: string;
}
