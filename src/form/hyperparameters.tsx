import { addIcon, closeIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { parseValue } from '../spec';
import { Errors } from './fields';

/**
 * Name and value rows; a value that reads as a number or boolean is sent as one.
 */
export function HyperparameterFields(props: {
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
