/**
 * The job spec as the form sees it: read from the server's JSON Schema, edited
 * immutably, prefilled from a notebook's repository. No JupyterLab imports, so
 * it is unit-tested on its own.
 */
import type { FieldError, JobSpec, Repo } from './api';

export type Schema = { [key: string]: any };
export type Draft = { [key: string]: any };

/**
 * `node` with its `$ref` (a JSON pointer into `root`) followed; the node's own
 * keywords (title, description) win over the target's.
 */
export function resolve(root: Schema, node: Schema | undefined): Schema {
  let resolved = node ?? {};
  while (typeof resolved.$ref === 'string') {
    const { $ref, ...own } = resolved;
    const target = $ref
      .replace(/^#\//, '')
      .split('/')
      .reduce((at: Schema, key: string) => at?.[key], root);
    resolved = { ...target, ...own };
  }
  return resolved;
}

/**
 * The schema of the field at `path` ("tensorboard.logdir", "replicas.worker.count"),
 * looking through references, maps (additionalProperties) and alternatives (oneOf).
 */
export function schemaAt(root: Schema, path: string): Schema | undefined {
  let node: Schema | undefined = resolve(root, root);
  for (const key of path.split('.')) {
    node = child(root, node, key);
    if (!node) {
      return undefined;
    }
  }
  return node;
}

function child(root: Schema, node: Schema, key: string): Schema | undefined {
  const found =
    node.properties?.[key] ??
    (typeof node.additionalProperties === 'object'
      ? node.additionalProperties
      : undefined);
  if (found) {
    return resolve(root, found);
  }
  for (const option of node.oneOf ?? []) {
    const inOption = child(root, resolve(root, option), key);
    if (inOption) {
      return inOption;
    }
  }
  return undefined;
}

/**
 * The replica roles a framework allows, in the schema's order; the schema says
 * so in its `allOf` rules ("if framework is X then replicas are named Y").
 */
export function rolesFor(root: Schema, framework: string): string[] {
  for (const rule of root.allOf ?? []) {
    const condition = rule.if?.properties?.framework ?? {};
    if (condition.const === framework || condition.enum?.includes(framework)) {
      const roles = rule.then?.properties?.replicas?.propertyNames?.enum;
      if (roles) {
        return roles;
      }
    }
  }
  return root.properties?.replicas?.propertyNames?.enum ?? ['worker'];
}

/**
 * `draft` with the value at `path` replaced; `undefined`, '' and emptied objects
 * are removed, so the spec holds only what the person set.
 */
export function setIn(draft: Draft, path: string, value: unknown): Draft {
  const [key, ...rest] = path.split('.');
  const next =
    rest.length === 0
      ? value
      : setIn(isObject(draft[key]) ? draft[key] : {}, rest.join('.'), value);
  const copy = { ...draft };
  if (next === undefined || next === '' || (isObject(next) && isEmpty(next))) {
    delete copy[key];
  } else {
    copy[key] = next;
  }
  return copy;
}

export function getIn(draft: Draft, path: string): any {
  return path
    .split('.')
    .reduce((at: any, key) => (isObject(at) ? at[key] : undefined), draft);
}

function isObject(value: unknown): value is Draft {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isEmpty(value: Draft): boolean {
  return Object.keys(value).length === 0;
}

/**
 * The role a framework's single replica takes: PyTorch's rank 0 is its master
 * (as Kubeflow's PyTorchJob has it); every other framework's, a worker.
 */
export function leadRole(framework: string): string {
  return framework === 'pytorch' ? 'master' : 'worker';
}

/**
 * The role of a draft that is not distributed: the one it has, else its
 * framework's lead.
 */
export function soleRole(
  replicas: Draft | undefined,
  framework: string
): string {
  return Object.keys(replicas ?? {})[0] ?? leadRole(framework);
}

/**
 * Of `replicas`, the roles the framework allows; at least one worker. A single
 * replica takes the framework's lead role, its resources with it.
 */
export function replicasFor(
  root: Schema,
  replicas: Draft | undefined,
  framework: string
): Draft {
  if (!isDistributed({ replicas })) {
    const [single] = Object.values(replicas ?? {});
    return { [leadRole(framework)]: single ?? { count: 1 } };
  }
  const roles = rolesFor(root, framework);
  const kept = Object.fromEntries(
    Object.entries(replicas ?? {}).filter(([role]) => roles.includes(role))
  );
  return Object.keys(kept).length ? kept : { worker: { count: 1 } };
}

/**
 * Distributed: a replica count per role, starting from two workers. Not
 * distributed: one replica in the `lead` role, keeping the resources of that
 * role, else of the workers.
 */
export function distributedReplicas(
  replicas: Draft | undefined,
  distributed: boolean,
  lead = 'worker'
): Draft {
  if (!distributed) {
    const single = replicas?.[lead] ?? replicas?.worker ?? {};
    return { [lead]: { ...single, count: 1 } };
  }
  const worker = replicas?.worker ?? {};
  const count = Math.max(worker.count ?? 1, 2);
  return { ...replicas, worker: { ...worker, count } };
}

export function isDistributed(draft: Draft): boolean {
  const replicas: Draft[] = Object.values(draft.replicas ?? {});
  return (
    replicas.length > 1 || replicas.some(replica => (replica.count ?? 1) > 1)
  );
}

/**
 * The code with another ref: unpinned (its commit, and the snapshot of changes
 * taken on that commit, dropped), for the server to pin the ref at submit.
 */
export function withRef(code: Draft, ref: string): Draft {
  return setIn(without(code, ['commit', 'snapshot']), 'ref', ref);
}

function without(draft: Draft, keys: string[]): Draft {
  return Object.fromEntries(
    Object.entries(draft).filter(([key]) => !keys.includes(key))
  );
}

/**
 * Whether a command (or any code) names where a job writes TensorBoard's event
 * files: DISTRAIN_LOG_DIR, or the placeholder {{ logdir }}.
 */
export function writesEventFiles(code: string | undefined): boolean {
  return /DISTRAIN_LOG_DIR|\{\{\s*logdir\s*\}\}/.test(code ?? '');
}

/**
 * The choices a select offers: the server's, and the draft's own value where it
 * is not among them (so the select shows it, and the server's check says why).
 */
export function choicesWith(choices: string[], current?: string): string[] {
  return current && !choices.includes(current)
    ? [...choices, current]
    : choices;
}

/**
 * A hyperparameter as typed: a number or boolean when it reads as one, else the text.
 */
export function parseValue(text: string): string | number | boolean {
  const trimmed = text.trim();
  if (trimmed === 'true' || trimmed === 'false') {
    return trimmed === 'true';
  }
  if (trimmed !== '' && Number.isFinite(Number(trimmed))) {
    return Number(trimmed);
  }
  return text;
}

/**
 * Each error on the closest field the form shows (the longest path prefix);
 * errors no field claims are `general`.
 */
export function assignErrors(
  errors: FieldError[],
  fields: Iterable<string>
): { byField: Map<string, string[]>; general: string[] } {
  const known = new Set(fields);
  const byField = new Map<string, string[]>();
  const general: string[] = [];
  for (const error of errors) {
    const parts = error.path ? error.path.split('.') : [];
    while (parts.length && !known.has(parts.join('.'))) {
      parts.pop();
    }
    const field = parts.join('.');
    if (field) {
      byField.set(field, [...(byField.get(field) ?? []), error.message]);
    } else {
      general.push(
        error.path ? `${error.path}: ${error.message}` : error.message
      );
    }
  }
  return { byField, general };
}

/**
 * A job name from any text: lowercase letters, digits and hyphens, starting
 * with a letter, at most `maxLength` long.
 */
export function jobName(text: string, maxLength = 50): string {
  const name = text
    .toLowerCase()
    .replace(/\.[^.]*$/, '')
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^[^a-z]+/, '')
    .slice(0, maxLength)
    .replace(/-+$/, '');
  return name || 'training';
}

export interface Prefill {
  spec: Draft;
  /** The job it starts from: the repository's last, where it has no distrain.yaml. */
  from?: string;
  /** That job's backend. */
  backend?: string;
  /** What to know before training from this code: the server's notes. */
  notes: string[];
  /** Where, relative to the Jupyter root, the repo's distrain.yaml is (or would be saved). */
  specFile: string;
  /** The directory of specFile on the server (its paths are saved relative to it). */
  specDirectory: string;
  /** The checkout whose uncommitted work or unpushed commits the job may include (code.changes_from). */
  changes?: string;
}

/**
 * A job for the code around `notebook` (a path relative to the Jupyter root):
 * the repo's distrain.yaml if any, else the last job of the repo (its setup;
 * a name of its own), else one replica running the notebook; the code the
 * server proposes (pinned to the checked-out commit), with its notes; and
 * TensorBoard on where the code writes event files and the spec does not say.
 */
export function prefill(repo: Repo, notebook: string): Prefill {
  const file = repo.files?.['distrain.yaml'];
  const loaded = isObject(file?.spec) ? (file?.spec as Draft) : undefined;
  const last = loaded ? null : repo.last_job;
  const isNotebook = notebook.endsWith('.ipynb');
  const notebookDir = isNotebook
    ? notebook.slice(0, Math.max(0, notebook.lastIndexOf('/')))
    : notebook;
  const fileName = notebook.slice(notebook.lastIndexOf('/') + 1);
  // The command runs at the repository's top.
  const subdirectory = repo.git?.subdirectory ?? '.';
  const commandPath =
    subdirectory === '.' ? fileName : `${subdirectory}/${fileName}`;
  const fresh = {
    name: jobName(
      isNotebook
        ? fileName
        : ((repo.git?.root ?? repo.directory).split('/').pop() ?? '')
    ),
    framework: 'python',
    command: isNotebook ? `ipython ${shellQuote(commandPath)}` : '',
    replicas: { worker: { count: 1 } }
  };
  const base: Draft =
    loaded ?? (last ? setupOf(last.spec, last.next_name) : fresh);
  const writes = repo.writes_event_files || writesEventFiles(base.command);
  const spec = {
    ...(writes && base.tensorboard?.enabled === undefined
      ? setIn(base, 'tensorboard.enabled', true)
      : base),
    code: fileCode(loaded?.code, file?.path) ?? repo.code
  };
  const git = repo.git;
  const unsaved =
    git && (git.dirty || (git.untracked ?? 0) > 0 || (git.ahead ?? 0) > 0);
  const found = file?.path;
  return {
    spec,
    ...(last ? { from: last.name, backend: last.backend } : {}),
    notes: repo.notes,
    specFile: specFilePath(repo, notebookDir),
    specDirectory: found
      ? found.slice(0, found.lastIndexOf('/'))
      : repo.directory,
    ...(unsaved && spec.code && 'git' in spec.code ? { changes: git.root } : {})
  };
}

/**
 * What a new job takes of an earlier one's spec: its setup, under `name`;
 * not its code (the checkout's of now), nor what is of that run alone (the
 * job it resumed from, the sweep it was a trial of).
 */
function setupOf(spec: Draft, name: string): Draft {
  return { ...without(spec, ['code', 'resume_from', 'trial_of']), name };
}

/**
 * The directories of a spec's code that are of this machine: where it is, the
 * repository (when a path, not a URL), and the checkout whose changes it
 * includes.
 */
function localDirectories(code: Draft): string[] {
  const isPath = (key: string) =>
    typeof code[key] === 'string' &&
    (key !== 'git' || /^(\/|\.)/.test(code[key]));
  return ['path', 'git', 'changes_from'].filter(isPath);
}

/**
 * distrain.yaml's code, its relative directories (relative to the file) made absolute.
 */
function fileCode(code: Draft | undefined, file?: string): Draft | undefined {
  if (!code || !file) {
    return code;
  }
  const directory = file.slice(0, file.lastIndexOf('/'));
  const resolved = { ...code };
  for (const key of localDirectories(code)) {
    const path = code[key].replace(/^\.\/?/, '');
    if (!code[key].startsWith('/')) {
      resolved[key] = path ? `${directory}/${path}` : directory;
    }
  }
  return resolved;
}

/**
 * The Jupyter path of the repo's distrain.yaml: where it was found, else next to
 * the notebook.
 */
function specFilePath(repo: Repo, notebookDir: string): string {
  const found = repo.files?.['distrain.yaml']?.path;
  const dirs = notebookDir.split('/').filter(Boolean);
  // How far below the repository root the notebook's directory is.
  const depth = (repo.git?.subdirectory ?? '.')
    .split('/')
    .filter(part => part && part !== '.').length;
  const atRepoRoot =
    found !== undefined &&
    found !== `${repo.directory}/distrain.yaml` &&
    depth <= dirs.length;
  const dir = atRepoRoot ? dirs.slice(0, dirs.length - depth) : dirs;
  return [...dir, 'distrain.yaml'].join('/');
}

/**
 * The spec as distrain.yaml in `directory` keeps it, with nothing of this
 * machine or this moment: without the pinned commit (the next commit would make
 * it stale), the checkout whose changes it includes and their snapshot (ticked
 * anew in each form), and with its code's directories relative to the file
 * where they are inside the file's.
 */
export function specForFile(spec: Draft, directory: string): JobSpec {
  if (!spec.code) {
    return spec as JobSpec;
  }
  const code: Draft = { ...spec.code };
  for (const key of ['commit', 'changes_from', 'snapshot']) {
    delete code[key];
  }
  for (const key of localDirectories(code)) {
    if (code[key] === directory) {
      code[key] = '.';
    } else if (code[key].startsWith(`${directory}/`)) {
      code[key] = `.${code[key].slice(directory.length)}`;
    }
  }
  return { ...spec, code } as JobSpec;
}

function shellQuote(text: string): string {
  return /^[\w@%+=:,./-]+$/.test(text)
    ? text
    : `'${text.replace(/'/g, "'\\''")}'`;
}
