import * as React from 'react';

import { Schema, schemaAt } from '../spec';

/**
 * A field of the draft at `path`, with its errors; `input` replaces the one its
 * schema suggests.
 */
export type Field = (path: string, input?: JSX.Element) => JSX.Element;

/**
 * Set the draft's value at `path` (undefined or '' removes it): how every part
 * of the form changes the draft.
 */
export type SetDraft = (path: string, value: unknown) => void;

export function Section(props: {
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

/**
 * The messages of the field at `path` and of the fields inside it, but those
 * under `except` (shown elsewhere).
 */
export function errorsUnder(
  errors: Map<string, string[]>,
  path: string,
  except: string[] = []
): string[] {
  const under = (field: string, at: string) =>
    field === at || field.startsWith(`${at}.`);
  return [...errors]
    .filter(
      ([field]) =>
        under(field, path) && !except.some(other => under(field, other))
    )
    .flatMap(([, messages]) => messages);
}

export function Errors(props: { messages?: string[] }): JSX.Element | null {
  if (!props.messages?.length) {
    return null;
  }
  return (
    <>
      {props.messages.map(message => (
        <div
          key={message}
          className="jp-distrain-error"
          role="alert"
          tabIndex={-1}
        >
          {message}
        </div>
      ))}
    </>
  );
}

/**
 * One field drawn from its schema: a label (title, else the key), an input that
 * fits its type (choice, switch, number or text), its description, what the
 * admin's rules allow (`limit`) and its errors.
 */
export function SchemaField(props: {
  schema: Schema;
  path: string;
  value: any;
  onChange: (value: unknown) => void;
  errors?: string[];
  input?: JSX.Element;
  limit?: string;
}): JSX.Element {
  const node = schemaAt(props.schema, props.path) ?? {};
  const key = props.path.split('.').pop() ?? props.path;
  const input = props.input ?? (
    <SchemaInput node={node} value={props.value} onChange={props.onChange} />
  );
  return (
    <div
      className={`jp-distrain-field${props.errors?.length ? ' jp-mod-error' : ''}`}
      data-field={props.path}
    >
      <label>
        <span className="jp-distrain-label">{node.title ?? humanize(key)}</span>
        {input}
      </label>
      {node.description && (
        <div className="jp-distrain-help">{node.description}</div>
      )}
      <Limit note={props.limit} />
      <Errors messages={props.errors} />
    </div>
  );
}

/** What the admin's rules allow for a field, when they limit it. */
export function Limit(props: { note?: string }): JSX.Element | null {
  return props.note ? (
    <div className="jp-distrain-help jp-distrain-limit">{props.note}</div>
  ) : null;
}

export function SchemaInput(props: {
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
