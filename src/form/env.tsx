import { addIcon, closeIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { choicesWith, Draft } from '../spec';
import { envChanges, envPath, envRows, IEnvRow, overridden } from './envrows';
import { Errors, SetDraft } from './fields';

/**
 * Environment variables, a row each: for every replica or for one of the roles
 * the form shows (a role's over the job's), a name and a value, sent as typed.
 * A row's errors are under it. A row whose role the job no longer has (another
 * framework, no longer distributed) stays, said to be unsent, and counts again
 * when the role comes back; a single replica's rows follow it to its new role.
 */
export function EnvFields(props: {
  draft: Draft;
  set: SetDraft;
  /** The roles the form shows, in the table's order. */
  roles: string[];
  errors: Map<string, string[]>;
  help?: string;
}): JSX.Element {
  const { draft, set, roles, errors } = props;
  const [rows, setRows] = React.useState<IKeyedRow[]>(() =>
    envRows(draft).map(keyed)
  );
  // The name field of a row just added takes the focus.
  const added = React.useRef<number | null>(null);
  const names = React.useRef(new Map<number, HTMLInputElement>());
  React.useEffect(() => {
    if (added.current !== null) {
      names.current.get(added.current)?.focus();
      added.current = null;
    }
  }, [rows]);

  const write = (next: IKeyedRow[], shown = roles) => {
    for (const [path, value] of envChanges(draft, next, shown)) {
      set(path, value);
    }
  };
  const update = (next: IKeyedRow[]) => {
    setRows(next);
    write(next);
  };
  const edit = (key: number, change: Partial<IEnvRow>) =>
    update(rows.map(row => (row.key === key ? { ...row, ...change } : row)));

  // The roles shown change: a single replica's rows move with it to its new
  // role (as its resources do), and the rows of roles back again are sent.
  const shown = roles.join(' ');
  const before = React.useRef(roles);
  React.useEffect(() => {
    const [was, now] = [before.current, roles];
    before.current = roles;
    let next = rows;
    if (was.length === 1 && now.length === 1 && was[0] !== now[0]) {
      next = rows.map(row =>
        row.role === was[0] ? { ...row, role: now[0] } : row
      );
      setRows(next);
    }
    write(next);
  }, [shown]);

  const later = overridden(rows);
  const ids = React.useId();
  return (
    <div className="jp-distrain-env">
      {props.help && <div className="jp-distrain-help">{props.help}</div>}
      {rows.map((row, index) => {
        const { key, role, name, text } = row;
        const gone = role !== '' && !roles.includes(role);
        const messages = name ? errors.get(envPath(row)) : undefined;
        const about = name || 'the new variable';
        const note = `${ids}-${key}`;
        return (
          <div
            key={key}
            className={`jp-distrain-env-row${messages?.length ? ' jp-mod-error' : ''}`}
            data-env={role ? `${role}.${name}` : name}
          >
            <select
              className="jp-mod-styled"
              aria-label={`For ${about}`}
              aria-describedby={gone || later.has(index) ? note : undefined}
              value={role}
              onChange={event => edit(key, { role: event.target.value })}
            >
              <option value="">All replicas</option>
              {choicesWith(roles, role || undefined).map(choice => (
                <option key={choice} value={choice}>
                  {choice}
                </option>
              ))}
            </select>
            <input
              ref={input => {
                if (input) {
                  names.current.set(key, input);
                } else {
                  names.current.delete(key);
                }
              }}
              className="jp-mod-styled jp-distrain-mono"
              aria-label="Variable name"
              aria-invalid={Boolean(messages?.length) || undefined}
              placeholder="NAME"
              spellCheck={false}
              autoComplete="off"
              value={name}
              onChange={event => edit(key, { name: event.target.value })}
            />
            <input
              className="jp-mod-styled jp-distrain-mono"
              aria-label={`Value of ${about}${role ? ` for ${role}` : ''}`}
              placeholder="value"
              spellCheck={false}
              autoComplete="off"
              value={text}
              onChange={event => edit(key, { text: event.target.value })}
            />
            <button
              type="button"
              className="jp-Button jp-mod-minimal"
              title={`Remove ${name || 'this variable'}`}
              aria-label={`Remove ${name || 'this variable'}${role ? ` for ${role}` : ''}`}
              onClick={() => update(rows.filter(other => other.key !== key))}
            >
              <closeIcon.react tag="span" elementSize="small" />
            </button>
            {(gone || later.has(index)) && (
              <div id={note} className="jp-distrain-help jp-distrain-env-note">
                {gone
                  ? `This job has no ${role} now: not sent. Choose who it is for, or remove it.`
                  : `Set again below for ${role || 'all replicas'}: that row counts.`}
              </div>
            )}
            <Errors messages={messages} />
          </div>
        );
      })}
      <button
        type="button"
        className="jp-Button jp-mod-minimal jp-distrain-add"
        onClick={() => {
          const row = keyed({ role: '', name: '', text: '' });
          added.current = row.key;
          update([...rows, row]);
        }}
      >
        <addIcon.react tag="span" elementSize="small" /> Add variable
      </button>
      <Errors messages={errors.get('env')} />
      {roles.map(role => (
        <Errors
          key={role}
          messages={errors
            .get(`replicas.${role}.env`)
            ?.map(message => `${role}: ${message}`)}
        />
      ))}
    </div>
  );
}

interface IKeyedRow extends IEnvRow {
  /** The row's own, for React: rows are added and removed anywhere. */
  key: number;
}

let lastKey = 0;

function keyed(row: IEnvRow): IKeyedRow {
  return { ...row, key: ++lastKey };
}
