import { ReactWidget } from '@jupyterlab/apputils';
import { Contents } from '@jupyterlab/services';
import * as React from 'react';
import YAML from 'yaml';

import { fieldErrors, Job, JobSpec, jobsAPI } from '../api';
import {
  assignErrors,
  Draft,
  getIn,
  isDistributed,
  rolesFor,
  Schema,
  schemaAt,
  soleRole,
  specForFile
} from '../spec';
import { CodeFields } from './code';
import { EnvFields } from './env';
import { Errors, Field, SchemaField, Section } from './fields';
import { IFormSource, useDraft, useDryRun } from './hooks';
import { HyperparameterFields } from './hyperparameters';
import { JobFields } from './job';
import { limitNote } from './limits';
import { MoreFields, ObjectFields } from './more';
import { ReplicaFields } from './replicas';
import { VolumeField } from './volumes';

interface IFormProps extends IFormSource {
  contents: Contents.IManager;
  onSubmitted: (job: Job) => void;
}

/**
 * A new job for the code around a notebook: fields, titles, choices and limits
 * come from the job spec's JSON Schema; the server checks the spec as it is typed.
 */
export function NewJobForm(props: IFormProps): JSX.Element {
  const { loaded, loadError, draft, set, backend, setBackend } =
    useDraft(props);
  const { errors, setErrors, warnings, checked } = useDryRun(
    draft,
    backend,
    loaded !== null,
    loaded?.snapshotOf
  );
  const [busy, setBusy] = React.useState(false);
  // Distributed or not: the person's choice, which counts typed on the way
  // (say, 1 worker before the ps) do not flip; until then, as the spec the form
  // started from.
  const [distributedChoice, setDistributed] = React.useState<boolean>();
  const [saved, setSaved] = React.useState('');
  const form = React.useRef<HTMLFormElement>(null);
  // Each refused submit moves focus to the first error, which says why.
  const [refusals, setRefusals] = React.useState(0);
  React.useEffect(() => {
    if (refusals) {
      form.current?.querySelector<HTMLElement>('.jp-distrain-error')?.focus();
    }
  }, [refusals]);
  // Opened, the form is ready to type into: focus on its first field, unless
  // the person went on typing elsewhere meanwhile.
  React.useEffect(() => {
    const active = document.activeElement as HTMLElement | null;
    const typing =
      active?.isContentEditable || active?.matches('input, select, textarea');
    if (loaded && !(typing && !form.current?.contains(active))) {
      firstField(form.current)?.focus();
    }
  }, [loaded !== null]);

  if (loadError) {
    return <div className="jp-distrain-error">{loadError}</div>;
  }
  if (!loaded) {
    return <div className="jp-distrain-form">Loading…</div>;
  }
  const { schema, cluster, specFile } = loaded;
  const framework = draft.framework ?? schema.properties.framework.default;
  const distributed = distributedChoice ?? isDistributed(loaded.spec);
  // The roles the form shows: the framework's, else the one replica's.
  const roles = distributed
    ? rolesFor(schema, framework)
    : [soleRole(draft.replicas, framework)];
  // What a fine-tune resumes from comes first, not folded away.
  const resumes = draft.resume_from !== undefined || Boolean(props.finetune);
  const { byField, general } = assignErrors(
    errors,
    shownFields(schema, draft, roles)
  );
  const field: Field = (path, input) => (
    <SchemaField
      key={path}
      schema={schema}
      path={path}
      value={getIn(draft, path)}
      onChange={value => set(path, value)}
      errors={byField.get(path)}
      input={input}
      limit={limitNote(cluster.limits, path)}
    />
  );

  const refused = checked && errors.length > 0;
  const submit = async () => {
    if (busy || refused) {
      setRefusals(count => count + 1);
      return;
    }
    setBusy(true);
    try {
      props.onSubmitted(
        await jobsAPI.submit(draft as JobSpec, backend, loaded.snapshotOf)
      );
    } catch (error) {
      setErrors(fieldErrors(error));
      setRefusals(count => count + 1);
    } finally {
      setBusy(false);
    }
  };
  const save = async (specFile: string) => {
    try {
      await props.contents.save(specFile, {
        type: 'file',
        format: 'text',
        content: YAML.stringify(specForFile(draft, loaded.specDirectory!))
      });
      setSaved(`Saved to ${specFile}`);
    } catch (error) {
      setSaved(`Could not save ${specFile}: ${(error as Error).message}`);
    }
  };

  return (
    <form
      ref={form}
      className="jp-distrain-form"
      onSubmit={event => {
        event.preventDefault();
        void submit();
      }}
      onKeyDown={event => {
        if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
          event.preventDefault();
          void submit();
        }
      }}
    >
      {loaded.from && (
        <div className="jp-distrain-help jp-distrain-prefilled" role="note">
          Filled in from {loaded.from}, the last job of this repository; its
          code is the checkout as it is now.
        </div>
      )}
      {resumes && field('resume_from')}
      <Section title="Job">
        <JobFields
          schema={schema}
          cluster={cluster}
          draft={draft}
          set={set}
          field={field}
          backend={backend}
          setBackend={setBackend}
        />
      </Section>
      <Section title="Code">
        <CodeFields
          schema={schema}
          draft={draft}
          set={set}
          field={field}
          notes={loaded.notes}
          changes={loaded.changes}
          backend={backend}
          copied={
            loaded.copied
              ? { job: loaded.copied, code: loaded.spec.code }
              : undefined
          }
        />
      </Section>
      <Section title={schemaAt(schema, 'replicas')?.title ?? 'Replicas'}>
        <ReplicaFields
          schema={schema}
          cluster={cluster}
          draft={draft}
          framework={framework}
          roles={roles}
          distributed={distributed}
          setDistributed={setDistributed}
          set={set}
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
      <Section title={schemaAt(schema, 'env')?.title ?? 'Environment'}>
        <EnvFields
          draft={draft}
          set={set}
          roles={roles}
          errors={byField}
          help={schemaAt(schema, 'env')?.description}
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
        <ObjectFields schema={schema} parent="tensorboard" field={field} />
      </Section>
      <MoreFields
        schema={schema}
        field={field}
        placed={resumes ? ['resume_from'] : []}
      />
      <Errors messages={general} />
      {checked && !refused && warnings.length > 0 && (
        <div className="jp-distrain-outlook" role="status">
          <div className="jp-distrain-outlook-title">
            It would not start at once:
          </div>
          {warnings.map(warning => (
            <div key={warning.path + warning.message}>{warning.message}</div>
          ))}
        </div>
      )}
      <div className="jp-distrain-form-buttons">
        <button
          type="submit"
          className="jp-Button jp-mod-styled jp-mod-accept"
          aria-disabled={busy || refused}
          aria-keyshortcuts="Control+Enter"
          title="Submit (Ctrl+Enter)"
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
            (!checked
              ? ''
              : refused
                ? `Fix ${errors.length === 1 ? 'the error' : `the ${errors.length} errors`} above to submit.`
                : warnings.length
                  ? 'The server accepts this job; it would wait (see above).'
                  : 'The server accepts this job.')}
        </span>
      </div>
    </form>
  );
}

/** The form's first field that takes typing: the job's name, or what a fine-tune resumes from. */
function firstField(form: HTMLFormElement | null): HTMLElement | null {
  return (
    form?.querySelector('input:enabled, select:enabled, textarea:enabled') ??
    null
  );
}

/**
 * Every field path the form shows, so server errors land on the closest one.
 */
function shownFields(schema: Schema, draft: Draft, roles: string[]): string[] {
  const fields = Object.keys(schema.properties);
  for (const parent of ['tensorboard', 'policy', 'progress']) {
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
      'resources.gpu_type',
      'resources.cpu',
      'resources.memory',
      'env'
    ]) {
      fields.push(`replicas.${role}.${key}`);
    }
    for (const key of Object.keys(getIn(draft, `replicas.${role}.env`) ?? {})) {
      fields.push(`replicas.${role}.env.${key}`);
    }
  }
  for (const key of Object.keys(draft.hyperparameters ?? {})) {
    fields.push(`hyperparameters.${key}`);
  }
  for (const key of Object.keys(draft.env ?? {})) {
    fields.push(`env.${key}`);
  }
  for (const volume of ['data', 'output']) {
    for (const key of ['volume', 'path', 'host_path', 'link_as']) {
      fields.push(`${volume}.${key}`);
    }
  }
  return fields;
}

/**
 * The new-job form as a main-area tab.
 */
export class NewJobWidget extends ReactWidget {
  constructor(readonly props: IFormProps) {
    super();
    this.addClass('jp-distrain-form-widget');
    this.node.tabIndex = -1;
  }

  render(): JSX.Element {
    return <NewJobForm {...this.props} />;
  }

  /**
   * Activated from outside (its tab, a command), the form's first field takes
   * the focus (the form itself while it loads).
   */
  protected onActivateRequest(): void {
    if (!this.node.contains(document.activeElement)) {
      const form = this.node.querySelector<HTMLFormElement>('form');
      (firstField(form) ?? this.node).focus();
    }
  }
}
