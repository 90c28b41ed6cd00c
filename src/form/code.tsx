import * as React from 'react';

import { fieldErrors, JobCode, jobsAPI, secretsAPI } from '../api';
import { Draft, getIn, Schema, schemaAt, withRef } from '../spec';
import { Field, SetDraft } from './fields';
import { cloneChoices } from './pinned';

/**
 * Git repository (URL, ref, pinned commit) or local directory, as the schema's
 * `oneOf` offers; changing the ref unpins the commit (and the snapshot of
 * changes taken on it), which the server pins again. A copy of a job on a
 * branch offers its commit again or the branch as it is now.
 */
export function CodeFields(props: {
  schema: Schema;
  draft: Draft;
  set: SetDraft;
  field: Field;
  /** What to know about the code before training it. */
  notes: string[];
  /** The checkout whose uncommitted work and unpushed commits the job may include. */
  changes?: string;
  backend: string;
  /** The job a clone or fine-tune copies, and its code. */
  copied?: { job: string; code: Draft };
}): JSX.Element {
  const { schema, draft, set, field } = props;
  const included = Boolean(draft.code?.changes_from);
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
      {props.notes
        .filter(note => !(included && note.includes('--include-changes')))
        .map(note => (
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
          {props.copied && (
            <CodeChoice {...props.copied} draft={draft} set={set} />
          )}
          {props.changes && (
            <label
              className="jp-distrain-field jp-distrain-include-changes"
              title={`the job runs ${props.changes} as it is now`}
            >
              <input
                type="checkbox"
                checked={included}
                onChange={event =>
                  set(
                    'code.changes_from',
                    event.target.checked ? props.changes : undefined
                  )
                }
              />
              {draft.code?.snapshot
                ? 'Take my changes as they are now (the job ran them as they were when it was submitted)'
                : 'Include my changes (uncommitted work and unpushed commits)'}
            </label>
          )}
          {field('code.git', text('code.git'))}
          {field(
            'code.ref',
            text('code.ref', ref => set('code', withRef(draft.code, ref)))
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
              git={draft.code?.git ?? ''}
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
 * The code a copy of `job` runs, where its ref is a branch or tag: the same
 * commit (and changes), or the ref as it is now, unpinned for the server to pin
 * at submit; each named with what it is (the server asked what the ref names
 * now; without an answer, the choices say less).
 */
function CodeChoice(props: {
  job: string;
  /** The code as the job ran it. */
  code: Draft;
  draft: Draft;
  set: SetDraft;
}): JSX.Element | null {
  const { job, code, draft, set } = props;
  const [now, setNow] = React.useState<JobCode>({ ...code, head: null });
  React.useEffect(() => {
    jobsAPI
      .code(job)
      .then(setNow)
      .catch(() => undefined);
  }, [job]);
  const choices = cloneChoices(job, now, draft.code?.ref ?? '');
  if (!choices) {
    return null;
  }
  const same = draft.code?.commit === code.commit;
  const { ref, commit, snapshot } = code;
  return (
    <div
      className="jp-distrain-field jp-distrain-code-choice"
      role="radiogroup"
      aria-label="Code the job runs"
    >
      <label>
        <input
          type="radio"
          name="code-choice"
          checked={same}
          onChange={() =>
            set('code', {
              ...draft.code,
              ref,
              commit,
              ...(snapshot ? { snapshot } : {})
            })
          }
        />
        {choices.same}
      </label>
      <label>
        <input
          type="radio"
          name="code-choice"
          checked={!same}
          onChange={() => set('code', withRef(draft.code, draft.code.ref))}
        />
        {choices.now}
      </label>
    </div>
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
  git: string;
}): JSX.Element {
  const [names, setNames] = React.useState<string[]>([]);
  const [adding, setAdding] = React.useState(false);
  const blank = { name: '', username: '', password: '', host: '' };
  const [entry, setEntry] = React.useState(blank);
  const [problem, setProblem] = React.useState('');
  React.useEffect(() => {
    secretsAPI
      .names(props.backend || undefined)
      .then(setNames)
      .catch(error => setProblem((error as Error).message));
  }, [props.backend]);

  const store = async () => {
    try {
      const { name, ...secret } = entry;
      await secretsAPI.store(name, secret, props.backend || undefined);
      setNames(current => [...new Set([...current, name])].sort());
      props.onChange(name);
      setEntry(blank);
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
        onClick={() => {
          setEntry({ ...entry, host: entry.host || gitHost(props.git) });
          setAdding(!adding);
        }}
      >
        New credentials…
      </button>
      {adding && (
        <div className="jp-distrain-credentials-new">
          {input('name')}
          {input('username')}
          {input('password', 'password')}
          {input('host')}
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

/** The host (and port) git sends credentials to for an http(s) URL, else ''. */
export function gitHost(url: string): string {
  try {
    const parsed = new URL(url);
    return parsed.protocol === 'http:' || parsed.protocol === 'https:'
      ? parsed.host
      : '';
  } catch {
    return '';
  }
}
