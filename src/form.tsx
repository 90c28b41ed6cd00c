import { ReactWidget } from '@jupyterlab/apputils';
import { Contents } from '@jupyterlab/services';
import { addIcon, closeIcon } from '@jupyterlab/ui-components';
import * as React from 'react';
import YAML from 'yaml';

import {
  Backend,
  Cluster,
  FieldError,
  fieldErrors,
  Job,
  JobSpec,
  jobsAPI,
  secretsAPI,
  serverAPI
} from './api';
import {
  assignErrors,
  Draft,
  getIn,
  isDistributed,
  parseValue,
  prefill,
  rolesFor,
  Schema,
  schemaAt,
  setIn,
  specForFile,
  withDistributed,
  withFramework
} from './spec';

/** How long typing pauses before the server checks the spec. */
const VALIDATE_DELAY_MS = 300;

/** Top-level fields with a place in the layout; any other is drawn under "more". */
const PLACED = [
  'code',
  'name',
  'framework',
  'command',
  'image',
  'replicas',
  'hyperparameters',
  'data',
  'output',
  'tensorboard',
  'policy'
];

interface IFormProps {
  /** The notebook or directory whose code the job trains, relative to the Jupyter root. */
  path: string;
  /** A job to copy instead: its spec (same pinned code) under a free name, to edit. */
  clone?: string;
  contents: Contents.IManager;
  onSubmitted: (job: Job) => void;
  /** The backend chosen in the settings; empty or not enabled: the server's default. */
  backend?: string;
}

interface ILoaded {
  schema: Schema;
  cluster: Cluster;
  spec: Draft;
  /** What to know about the code before training it; none for a clone. */
  notes: string[];
  /** Where "Save as" writes the spec; none for a clone. */
  specFile?: string;
  /** The backend the form starts on. */
  backend?: string;
}

/** What the form starts from: the code around a notebook, or a job to clone. */
async function start(props: IFormProps): Promise<ILoaded> {
  const [schema, cluster] = await Promise.all([
    serverAPI.schema(),
    serverAPI.cluster()
  ]);
  if (props.clone) {
    const [job, spec] = await Promise.all([
      jobsAPI.get(props.clone),
      jobsAPI.cloneSpec(props.clone)
    ]);
    return { schema, cluster, spec, notes: [], backend: job.backend };
  }
  const filled = prefill(await serverAPI.repo(props.path), props.path);
  return { schema, cluster, ...filled };
}

/**
 * A new job for the code around a notebook: fields, titles, choices and limits
 * come from the job spec's JSON Schema; the server checks the spec as it is typed.
 */
export function NewJobForm(props: IFormProps): JSX.Element {
  const [loaded, setLoaded] = React.useState<ILoaded | null>(null);
  const [loadError, setLoadError] = React.useState('');
  const [draft, setDraft] = React.useState<Draft>({});
  const [errors, setErrors] = React.useState<FieldError[]>([]);
  const [checked, setChecked] = React.useState(false);
  const [busy, setBusy] = React.useState(false);
  const [saved, setSaved] = React.useState('');
  const [backend, setBackend] = React.useState('');

  React.useEffect(() => {
    start(props)
      .then(started => {
        const wanted = started.backend ?? props.backend ?? '';
        setBackend(
          started.cluster.backends.includes(wanted as Backend)
            ? wanted
            : started.cluster.default_backend
        );
        setLoaded(started);
        setDraft(started.spec);
      })
      .catch(error => setLoadError(String(error.message ?? error)));
  }, [props.path, props.clone]);

  // GPUs and volumes are the chosen backend's.
  React.useEffect(() => {
    if (loaded && backend && backend !== loaded.cluster.backend) {
      serverAPI
        .cluster(backend)
        .then(cluster =>
          setLoaded(current => current && { ...current, cluster })
        )
        .catch(error => setLoadError(String(error.message ?? error)));
    }
  }, [backend, loaded]);

  // Check the spec with the server once typing pauses; only the latest answer counts.
  const generation = React.useRef(0);
  React.useEffect(() => {
    if (!loaded) {
      return;
    }
    const current = ++generation.current;
    setChecked(false);
    const timer = setTimeout(() => {
      jobsAPI
        .check(draft as JobSpec, backend)
        .then(verdict => verdict.errors)
        .catch(fieldErrors)
        .then(found => {
          if (current === generation.current) {
            setErrors(found);
            setChecked(true);
          }
        });
    }, VALIDATE_DELAY_MS);
    return () => clearTimeout(timer);
  }, [draft, loaded, backend]);

  if (loadError) {
    return <div className="jp-distrain-error">{loadError}</div>;
  }
  if (!loaded) {
    return <div className="jp-distrain-form">Loading…</div>;
  }
  const { schema, cluster } = loaded;
  const roles = rolesFor(
    schema,
    draft.framework ?? schema.properties.framework.default
  );
  const fields = shownFields(schema, draft, roles);
  const { byField, general } = assignErrors(errors, fields);
  const set = (path: string, value: unknown) =>
    setDraft(current => setIn(current, path, value));
  const field = (path: string, input?: JSX.Element, label?: string) => (
    <SchemaField
      key={path}
      schema={schema}
      path={path}
      value={getIn(draft, path)}
      onChange={value => set(path, value)}
      errors={byField.get(path)}
      input={input}
      label={label}
    />
  );

  const submit = async () => {
    setBusy(true);
    try {
      props.onSubmitted(await jobsAPI.submit(draft as JobSpec, backend));
    } catch (error) {
      setErrors(fieldErrors(error));
    } finally {
      setBusy(false);
    }
  };
  const save = async (specFile: string) => {
    try {
      await props.contents.save(specFile, {
        type: 'file',
        format: 'text',
        content: YAML.stringify(specForFile(draft))
      });
      setSaved(`Saved to ${specFile}`);
    } catch (error) {
      setSaved(`Could not save ${specFile}: ${(error as Error).message}`);
    }
  };
  const { specFile } = loaded;

  const simple = (parent: string) =>
    Object.keys(schemaAt(schema, parent)?.properties ?? {}).map(key =>
      field(`${parent}.${key}`)
    );
  const others = Object.keys(schema.properties).filter(
    key => !PLACED.includes(key)
  );

  return (
    <form
      className="jp-distrain-form"
      onSubmit={event => {
        event.preventDefault();
        void submit();
      }}
    >
      <Section title="Code">
        <CodeFields
          schema={schema}
          draft={draft}
          set={set}
          field={field}
          notes={loaded.notes}
          backend={backend}
        />
      </Section>
      <Section title="Job">
        <BackendField
          backends={cluster.backends}
          value={backend}
          onChange={setBackend}
        />
        {field('name')}
        {field(
          'framework',
          <SchemaInput
            node={schemaAt(schema, 'framework') ?? {}}
            value={draft.framework}
            onChange={value =>
              setDraft(current => withFramework(schema, current, String(value)))
            }
          />
        )}
        {field(
          'command',
          <textarea
            className="jp-mod-styled jp-distrain-command"
            rows={3}
            value={draft.command ?? ''}
            onChange={event => set('command', event.target.value)}
          />
        )}
        {field(
          'image',
          <input
            className="jp-mod-styled"
            value={draft.image ?? ''}
            placeholder={
              backend === 'local'
                ? "not used: local jobs run in this server's environment"
                : (cluster.default_images?.[draft.framework ?? 'python'] ?? '')
            }
            onChange={event => set('image', event.target.value)}
          />
        )}
      </Section>
      <Section title={schemaAt(schema, 'replicas')?.title ?? 'Replicas'}>
        <ReplicaFields
          schema={schema}
          cluster={cluster}
          draft={draft}
          roles={roles}
          onChange={setDraft}
          errors={byField}
        />
      </Section>
      <Section title={schemaAt(schema, 'hyperparameters')?.title}>
        <HyperparameterFields
          value={draft.hyperparameters ?? {}}
          onChange={value => set('hyperparameters', value)}
          errors={byField}
          help={schemaAt(schema, 'hyperparameters')?.description}
        />
      </Section>
      <Section title="Data and output">
        {['data', 'output'].map(key => (
          <VolumeField
            key={key}
            schema={schema}
            path={key}
            cluster={cluster}
            value={draft[key]}
            onChange={value => set(key, value)}
            errors={byField}
          />
        ))}
      </Section>
      <Section title={schemaAt(schema, 'tensorboard')?.title}>
        {simple('tensorboard')}
      </Section>
      <details className="jp-distrain-section">
        <summary>{schemaAt(schema, 'policy')?.title} and more</summary>
        {simple('policy')}
        {others.map(key => field(key))}
      </details>
      {general.map(message => (
        <div key={message} className="jp-distrain-error" role="alert">
          {message}
        </div>
      ))}
      <div className="jp-distrain-form-buttons">
        <button
          type="submit"
          className="jp-Button jp-mod-styled jp-mod-accept"
          disabled={busy}
        >
          Submit
        </button>
        {specFile && (
          <button
            type="button"
            className="jp-Button jp-mod-styled jp-mod-reject"
            onClick={() => void save(specFile)}
            title={`Write this spec to ${specFile} (without the pinned commit)`}
          >
            Save as {specFile.split('/').pop()}
          </button>
        )}
        <span className="jp-distrain-form-status" aria-live="polite">
          {saved ||
            (checked && errors.length === 0
              ? 'The server accepts this job.'
              : '')}
        </span>
      </div>
    </form>
  );
}

/**
 * Every field path the form shows, so server errors land on the closest one.
 */
function shownFields(schema: Schema, draft: Draft, roles: string[]): string[] {
  const fields = Object.keys(schema.properties);
  for (const parent of ['tensorboard', 'policy']) {
    for (const key of Object.keys(schemaAt(schema, parent)?.properties ?? {})) {
      fields.push(`${parent}.${key}`);
    }
  }
  for (const key of ['git', 'ref', 'commit', 'credentials', 'path']) {
    fields.push(`code.${key}`);
  }
  for (const role of roles) {
    for (const key of [
      'count',
      'resources.gpus',
      'resources.cpu',
      'resources.memory'
    ]) {
      fields.push(`replicas.${role}.${key}`);
    }
  }
  for (const key of Object.keys(draft.hyperparameters ?? {})) {
    fields.push(`hyperparameters.${key}`);
  }
  for (const volume of ['data', 'output']) {
    for (const key of ['volume', 'path', 'host_path']) {
      fields.push(`${volume}.${key}`);
    }
  }
  return fields;
}

function Section(props: {
  title?: string;
  children: React.ReactNode;
}): JSX.Element {
  return (
    <fieldset className="jp-distrain-section">
      <legend>{props.title}</legend>
      {props.children}
    </fieldset>
  );
}

/** The messages of the field at `path` and of the fields inside it. */
function errorsUnder(errors: Map<string, string[]>, path: string): string[] {
  return [...errors]
    .filter(([field]) => field === path || field.startsWith(`${path}.`))
    .flatMap(([, messages]) => messages);
}

function Errors(props: { messages?: string[] }): JSX.Element | null {
  if (!props.messages?.length) {
    return null;
  }
  return (
    <>
      {props.messages.map(message => (
        <div key={message} className="jp-distrain-error" role="alert">
          {message}
        </div>
      ))}
    </>
  );
}

/**
 * One field drawn from its schema: a label (title, else the key), an input that
 * fits its type (choice, switch, number or text), its description and its errors.
 */
/**
 * Where the job runs: a choice when the server enables several backends.
 */
function BackendField(props: {
  backends: Backend[];
  value: string;
  onChange: (backend: string) => void;
}): JSX.Element {
  return (
    <div className="jp-distrain-field" data-field="backend">
      <label>
        <span className="jp-distrain-label">Backend</span>
        <select
          className="jp-mod-styled"
          value={props.value}
          disabled={props.backends.length < 2}
          onChange={event => props.onChange(event.target.value)}
        >
          {props.backends.map(name => (
            <option key={name} value={name}>
              {name}
            </option>
          ))}
        </select>
      </label>
      <div className="jp-distrain-help">
        local: processes on the Jupyter server's machine; kubernetes: pods in
        the cluster. The default comes from the settings.
      </div>
    </div>
  );
}

function SchemaField(props: {
  schema: Schema;
  path: string;
  value: any;
  onChange: (value: unknown) => void;
  errors?: string[];
  input?: JSX.Element;
  label?: string;
}): JSX.Element {
  const node = schemaAt(props.schema, props.path) ?? {};
  const key = props.path.split('.').pop() ?? props.path;
  const label = props.label ?? node.title ?? humanize(key);
  const input = props.input ?? (
    <SchemaInput node={node} value={props.value} onChange={props.onChange} />
  );
  return (
    <div
      className={`jp-distrain-field${props.errors?.length ? ' jp-mod-error' : ''}`}
      data-field={props.path}
    >
      <label>
        <span className="jp-distrain-label">{label}</span>
        {input}
      </label>
      {node.description && (
        <div className="jp-distrain-help">{node.description}</div>
      )}
      <Errors messages={props.errors} />
    </div>
  );
}

function SchemaInput(props: {
  node: Schema;
  value: any;
  onChange: (value: unknown) => void;
}): JSX.Element {
  const { node, value, onChange } = props;
  const types: string[] = [].concat(node.type ?? []);
  if (node.enum) {
    return (
      <select
        className="jp-mod-styled"
        value={value ?? node.default ?? ''}
        onChange={event => onChange(event.target.value)}
      >
        {node.enum.map((option: string) => (
          <option key={option} value={option}>
            {option}
          </option>
        ))}
      </select>
    );
  }
  if (types.includes('boolean')) {
    return (
      <input
        type="checkbox"
        checked={value ?? node.default ?? false}
        onChange={event => onChange(event.target.checked)}
      />
    );
  }
  if (types.includes('integer') || types.includes('number')) {
    return (
      <input
        className="jp-mod-styled"
        type="number"
        min={node.minimum}
        max={node.maximum}
        step={types.includes('integer') ? 1 : 'any'}
        value={value ?? ''}
        placeholder={node.default?.toString()}
        onChange={event =>
          onChange(
            event.target.value === '' ? undefined : Number(event.target.value)
          )
        }
      />
    );
  }
  return (
    <input
      className="jp-mod-styled"
      value={value ?? ''}
      placeholder={node.default?.toString()}
      onChange={event => onChange(event.target.value)}
    />
  );
}

function humanize(key: string): string {
  const words = key.replace(/_/g, ' ');
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/**
 * Git repository (URL, ref, pinned commit) or local directory, as the schema's
 * `oneOf` offers; changing the ref unpins the commit, which the server pins again.
 */
function CodeFields(props: {
  schema: Schema;
  draft: Draft;
  set: (path: string, value: unknown) => void;
  field: (path: string, input?: JSX.Element) => JSX.Element;
  /** What to know about the code before training it. */
  notes: string[];
  backend: string;
}): JSX.Element {
  const { schema, draft, set, field } = props;
  const options: Schema[] = schemaAt(schema, 'code')?.oneOf ?? [];
  const kind = draft.code && 'path' in draft.code ? 1 : 0;
  const text = (path: string, onChange = (v: string) => set(path, v)) => (
    <input
      className="jp-mod-styled"
      value={getIn(draft, path) ?? ''}
      onChange={event => onChange(event.target.value)}
    />
  );
  return (
    <>
      {props.notes.map(note => (
        <div key={note} className="jp-distrain-warning" role="note">
          {note}
        </div>
      ))}
      <label className="jp-distrain-field">
        <span className="jp-distrain-label">
          {schemaAt(schema, 'code')?.title}
        </span>
        <select
          className="jp-mod-styled"
          value={kind}
          onChange={event =>
            set(
              'code',
              Number(event.target.value) === 1
                ? { path: '.' }
                : { git: '', ref: 'HEAD' }
            )
          }
        >
          {options.map((option, index) => (
            <option key={index} value={index}>
              {option.title}
            </option>
          ))}
        </select>
      </label>
      {kind === 0 ? (
        <>
          {field('code.git', text('code.git'))}
          {field(
            'code.ref',
            text('code.ref', ref =>
              set('code', {
                ...setIn(draft.code, 'ref', ref),
                commit: undefined
              })
            )
          )}
          {field(
            'code.commit',
            <input
              className="jp-mod-styled jp-distrain-commit"
              readOnly
              value={draft.code?.commit ?? ''}
              placeholder="pinned from the ref when submitted"
            />
          )}
          {field(
            'code.credentials',
            <CredentialsInput
              value={draft.code?.credentials ?? ''}
              onChange={name => set('code.credentials', name || undefined)}
              backend={props.backend}
            />
          )}
        </>
      ) : (
        field('code.path', text('code.path'))
      )}
    </>
  );
}

/**
 * A stored secret to clone with, or new credentials: stored on the server (the
 * password goes there once and is never shown again), then chosen.
 */
function CredentialsInput(props: {
  value: string;
  onChange: (name: string) => void;
  backend: string;
}): JSX.Element {
  const [names, setNames] = React.useState<string[]>([]);
  const [adding, setAdding] = React.useState(false);
  const [entry, setEntry] = React.useState({
    name: '',
    username: '',
    password: ''
  });
  const [problem, setProblem] = React.useState('');
  React.useEffect(() => {
    secretsAPI
      .names(props.backend || undefined)
      .then(setNames)
      .catch(error => setProblem((error as Error).message));
  }, [props.backend]);

  const store = async () => {
    try {
      await secretsAPI.store(
        entry.name,
        entry.username,
        entry.password,
        props.backend || undefined
      );
      setNames(current => [...new Set([...current, entry.name])].sort());
      props.onChange(entry.name);
      setEntry({ name: '', username: '', password: '' });
      setAdding(false);
      setProblem('');
    } catch (error) {
      setProblem(
        fieldErrors(error)
          .map(e => (e.path ? `${e.path}: ${e.message}` : e.message))
          .join('; ')
      );
    }
  };
  const input = (key: keyof typeof entry, type = 'text') => (
    <input
      className="jp-mod-styled"
      type={type}
      aria-label={`credentials ${key}`}
      placeholder={key}
      autoComplete={type === 'password' ? 'new-password' : 'off'}
      value={entry[key]}
      onChange={event => setEntry({ ...entry, [key]: event.target.value })}
    />
  );
  const known = props.value && !names.includes(props.value);
  return (
    <div className="jp-distrain-credentials">
      <select
        className="jp-mod-styled"
        value={props.value}
        onChange={event => props.onChange(event.target.value)}
      >
        <option value="">none (a public repository)</option>
        {[...names, ...(known ? [props.value] : [])].map(name => (
          <option key={name} value={name}>
            {name}
          </option>
        ))}
      </select>
      <button
        type="button"
        className="jp-Button jp-mod-styled"
        onClick={() => setAdding(!adding)}
      >
        New credentials…
      </button>
      {adding && (
        <div className="jp-distrain-credentials-new">
          {input('name')}
          {input('username')}
          {input('password', 'password')}
          <button
            type="button"
            className="jp-Button jp-mod-styled jp-mod-accept"
            onClick={() => void store()}
          >
            Store
          </button>
        </div>
      )}
      {problem && (
        <div className="jp-distrain-error" role="alert">
          {problem}
        </div>
      )}
    </div>
  );
}

/**
 * One replica, or a count per role when distributed, with GPUs (and how many the
 * cluster has free), CPU and memory per replica.
 */
function ReplicaFields(props: {
  schema: Schema;
  cluster: Cluster;
  draft: Draft;
  roles: string[];
  onChange: (draft: Draft) => void;
  errors: Map<string, string[]>;
}): JSX.Element {
  const { schema, cluster, draft, onChange } = props;
  // The person's choice: counts typed on the way (say, 1 worker before the ps)
  // do not flip it.
  const [distributed, setDistributed] = React.useState(() =>
    isDistributed(draft)
  );
  const roles = distributed ? props.roles : ['worker'];
  const gpus = cluster.gpus ?? { capacity: 0, available: 0 };
  const replicaSchema = schemaAt(schema, 'replicas.worker') ?? {};
  const column = (key: string) => {
    const node =
      key === 'count'
        ? replicaSchema.properties?.count
        : schemaAt(schema, `replicas.worker.resources.${key}`);
    return node?.description ?? '';
  };
  const cell = (role: string, key: string, type: 'integer' | 'text') => {
    const path = `replicas.${role}.${key}`;
    const value = getIn(draft, path);
    return (
      <td>
        <input
          className="jp-mod-styled"
          aria-label={`${role} ${key.replace('resources.', '')}`}
          type={type === 'integer' ? 'number' : 'text'}
          min={type === 'integer' ? 0 : undefined}
          value={value ?? ''}
          placeholder={
            key === 'count' ? '0' : key === 'resources.gpus' ? '0' : 'any'
          }
          onChange={event => {
            const text = event.target.value;
            const parsed =
              text === ''
                ? undefined
                : type === 'integer'
                  ? Number(text)
                  : parseValue(text);
            if (key === 'count' && !parsed) {
              onChange(setIn(draft, `replicas.${role}`, undefined));
            } else {
              onChange(setIn(draft, path, parsed));
            }
          }}
        />
      </td>
    );
  };
  return (
    <>
      <label className="jp-distrain-field jp-distrain-inline">
        <input
          type="checkbox"
          checked={distributed}
          onChange={event => {
            setDistributed(event.target.checked);
            onChange(withDistributed(draft, event.target.checked));
          }}
        />
        <span className="jp-distrain-label">
          Distributed: several replicas, each in a role
        </span>
      </label>
      <table className="jp-distrain-replicas-form">
        <thead>
          <tr>
            <th>Role</th>
            {distributed && <th title={column('count')}>Count</th>}
            <th title={column('gpus')}>
              GPUs each{' '}
              <span className="jp-distrain-help">
                ({gpus.available} of {gpus.capacity} free)
              </span>
            </th>
            <th title={column('cpu')}>CPU</th>
            <th title={column('memory')}>Memory</th>
          </tr>
        </thead>
        <tbody>
          {roles.map(role => (
            <tr key={role} data-role={role}>
              <td>{role}</td>
              {distributed && cell(role, 'count', 'integer')}
              {cell(role, 'resources.gpus', 'integer')}
              {cell(role, 'resources.cpu', 'text')}
              {cell(role, 'resources.memory', 'text')}
            </tr>
          ))}
        </tbody>
      </table>
      {roles.map(role => (
        <Errors
          key={role}
          messages={errorsUnder(props.errors, `replicas.${role}`).map(
            m => `${role}: ${m}`
          )}
        />
      ))}
      <Errors messages={props.errors.get('replicas')} />
    </>
  );
}

/**
 * Name and value rows; a value that reads as a number or boolean is sent as one.
 */
function HyperparameterFields(props: {
  value: Record<string, unknown>;
  onChange: (value: Record<string, unknown> | undefined) => void;
  errors: Map<string, string[]>;
  help?: string;
}): JSX.Element {
  const [rows, setRows] = React.useState<[string, string][]>(() =>
    Object.entries(props.value).map(([key, value]) => [key, String(value)])
  );
  const update = (next: [string, string][]) => {
    setRows(next);
    const entries = next
      .filter(([key]) => key !== '')
      .map(([key, text]) => [key, parseValue(text)]);
    props.onChange(entries.length ? Object.fromEntries(entries) : undefined);
  };
  return (
    <div className="jp-distrain-hyperparameters">
      {props.help && <div className="jp-distrain-help">{props.help}</div>}
      {rows.map(([key, text], index) => (
        <div key={index} className="jp-distrain-hyperparameter">
          <input
            className="jp-mod-styled"
            aria-label="Hyperparameter name"
            placeholder="name"
            value={key}
            onChange={event =>
              update(
                rows.map((row, i) =>
                  i === index ? [event.target.value, row[1]] : row
                )
              )
            }
          />
          <input
            className="jp-mod-styled"
            aria-label={`Value of ${key}`}
            placeholder="value"
            value={text}
            onChange={event =>
              update(
                rows.map((row, i) =>
                  i === index ? [row[0], event.target.value] : row
                )
              )
            }
          />
          <button
            type="button"
            className="jp-Button jp-mod-minimal"
            title={`Remove ${key}`}
            onClick={() => update(rows.filter((_, i) => i !== index))}
          >
            <closeIcon.react tag="span" elementSize="small" />
          </button>
          <Errors messages={props.errors.get(`hyperparameters.${key}`)} />
        </div>
      ))}
      <button
        type="button"
        className="jp-Button jp-mod-minimal jp-distrain-add"
        onClick={() => update([...rows, ['', '']])}
      >
        <addIcon.react tag="span" elementSize="small" /> Add hyperparameter
      </button>
      <Errors messages={props.errors.get('hyperparameters')} />
    </div>
  );
}

/**
 * None, one of the volumes the backend offers (with a sub-directory), or a
 * directory of this host, as the schema's `oneOf` allows.
 */
function VolumeField(props: {
  schema: Schema;
  path: string;
  cluster: Cluster;
  value?: Draft;
  onChange: (value: Draft | undefined) => void;
  errors: Map<string, string[]>;
}): JSX.Element {
  const { schema, path, cluster, value, onChange } = props;
  const node = schemaAt(schema, path) ?? {};
  const volumes = cluster.volumes ?? [];
  const kind = !value ? 'none' : 'host_path' in value ? 'host_path' : 'volume';
  const choose = (choice: string) =>
    onChange(
      choice === 'none'
        ? undefined
        : choice === 'host_path'
          ? { host_path: '/' }
          : { volume: choice.slice('volume:'.length) }
    );
  const messages = errorsUnder(props.errors, path);
  return (
    <div
      className={`jp-distrain-field${messages.length ? ' jp-mod-error' : ''}`}
      data-field={path}
    >
      <label>
        <span className="jp-distrain-label">{node.title}</span>
        <select
          className="jp-mod-styled"
          value={kind === 'volume' ? `volume:${value?.volume}` : kind}
          onChange={event => choose(event.target.value)}
        >
          <option value="none">
            {path === 'output' ? "The job's own directory" : 'None'}
          </option>
          {volumes.map(volume => (
            <option key={volume} value={`volume:${volume}`}>
              Volume {volume}
            </option>
          ))}
          {kind === 'volume' && !volumes.includes(value?.volume) && (
            <option value={`volume:${value?.volume}`}>
              Volume {value?.volume}
            </option>
          )}
          <option value="host_path">Host directory</option>
        </select>
      </label>
      {kind === 'volume' && (
        <input
          className="jp-mod-styled"
          aria-label={`${node.title} sub-directory`}
          placeholder="sub-directory (optional)"
          value={value?.path ?? ''}
          onChange={event =>
            onChange(setIn(value ?? {}, 'path', event.target.value))
          }
        />
      )}
      {kind === 'host_path' && (
        <input
          className="jp-mod-styled"
          aria-label={`${node.title} host directory`}
          value={value?.host_path ?? ''}
          onChange={event => onChange({ host_path: event.target.value })}
        />
      )}
      {node.description && (
        <div className="jp-distrain-help">{node.description}</div>
      )}
      <Errors messages={messages} />
    </div>
  );
}

/**
 * The new-job form as a main-area tab.
 */
export class NewJobWidget extends ReactWidget {
  constructor(readonly props: IFormProps) {
    super();
    this.addClass('jp-distrain-form-widget');
  }

  render(): JSX.Element {
    return <NewJobForm {...this.props} />;
  }
}
