/**
 * The form's environment variables as rows (the job's, then each role's) and
 * back: what the spec's `env` and `replicas.<role>.env` hold. No JupyterLab
 * imports, so it is unit-tested on its own.
 */
import type { Draft } from '../spec';

export type EnvValue = string | number | boolean;

export interface IEnvRow {
  /** Whose variable it is: '' for every replica, else a role's (over the job's). */
  role: string;
  name: string;
  /** The value as typed. */
  text: string;
  /** The value as the spec had it (a number, a boolean), sent as such while its text is unchanged. */
  value?: EnvValue;
}

/** The rows of a spec: its `env`, then each role's, in the replicas' order. */
export function envRows(draft: Draft): IEnvRow[] {
  const rows = (role: string, env: unknown): IEnvRow[] =>
    Object.entries(isObject(env) ? env : {}).map(([name, value]) => ({
      role,
      name,
      text: String(value),
      value: value as EnvValue
    }));
  return [
    ...rows('', draft.env),
    ...Object.entries(isObject(draft.replicas) ? draft.replicas : {}).flatMap(
      ([role, replica]) => rows(role, isObject(replica) ? replica.env : {})
    )
  ];
}

/**
 * The variables the rows give `role` ('' the job): named rows only, a later
 * row over an earlier one of the same name; none: undefined.
 */
export function envOf(
  rows: IEnvRow[],
  role: string
): Record<string, EnvValue> | undefined {
  const entries = rows
    .filter(row => row.role === role && row.name !== '')
    .map(row => [
      row.name,
      row.value !== undefined && String(row.value) === row.text
        ? row.value
        : row.text
    ]);
  return entries.length ? Object.fromEntries(entries) : undefined;
}

/**
 * The draft's changes (path, value) that make its env and the env of each of
 * `roles` (those the form shows) what the rows say; rows of other roles are not
 * sent. A role the draft has no replica of gets a count of 0, as the form's
 * table shows it (the schema's default would be 1).
 */
export function envChanges(
  draft: Draft,
  rows: IEnvRow[],
  roles: string[]
): [string, unknown][] {
  const changes: [string, unknown][] = [];
  const job = envOf(rows, '');
  if (!sameEnv(job, draft.env)) {
    changes.push(['env', job]);
  }
  for (const role of roles) {
    const env = envOf(rows, role);
    const replica = draft.replicas?.[role];
    if (sameEnv(env, replica?.env)) {
      continue;
    }
    changes.push(
      replica === undefined
        ? [`replicas.${role}`, { count: 0, env }]
        : [`replicas.${role}.env`, env]
    );
  }
  return changes;
}

/**
 * The rows whose variable a later row sets again for the same replicas: the
 * later one counts.
 */
export function overridden(rows: IEnvRow[]): Set<number> {
  const later = new Set<string>();
  const found = new Set<number>();
  for (let index = rows.length - 1; index >= 0; index--) {
    const { role, name } = rows[index];
    const key = `${role}\n${name}`;
    if (name !== '' && later.has(key)) {
      found.add(index);
    }
    later.add(key);
  }
  return found;
}

/** The field path of a row's errors: `env.NAME` or `replicas.ROLE.env.NAME`. */
export function envPath(row: IEnvRow): string {
  return row.role ? `replicas.${row.role}.env.${row.name}` : `env.${row.name}`;
}

function sameEnv(a: unknown, b: unknown): boolean {
  const entries = (env: unknown) =>
    JSON.stringify(Object.entries(isObject(env) ? env : {}));
  return entries(a) === entries(b);
}

function isObject(value: unknown): value is Draft {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
