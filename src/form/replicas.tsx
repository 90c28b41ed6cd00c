import * as React from 'react';

import { Cluster } from '../api';
import {
  Draft,
  getIn,
  isDistributed,
  parseValue,
  Schema,
  schemaAt,
  setIn,
  withDistributed
} from '../spec';
import { Errors, errorsUnder } from './fields';

/**
 * One replica, or a count per role when distributed, with GPUs (and how many the
 * cluster has free), CPU and memory per replica.
 */
export function ReplicaFields(props: {
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
