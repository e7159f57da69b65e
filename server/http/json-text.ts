/**
 * A response body already serialised as JSON, typically built by PostgreSQL (`json_agg`), so a
 * hot list never turns rows into objects only to stringify them again. `T` is the shape the text
 * holds, for the reader; `ApiRoutes` sends `text` as `application/json` unchanged.
 */
export class JsonText<T = unknown> {
  declare readonly shape?: T;
  constructor(readonly text: string) {}
}
