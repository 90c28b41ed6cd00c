import * as React from 'react';

import { Cluster } from '../api';
import {
  choicesWith,
  Draft,
  getIn,
  isDistributed,
  parseValue,
  Schema,
  schemaAt,
  setIn,
  withDistributed
} from '../spec';
import { Errors, errorsUnder, Limit } from './fields';
import { limitNote } from './limits';

/**
 * One replica, or a count per role when distributed, with GPUs (and how many the
 * cluster has free; a GPU type where the admin names some), CPU and memory per
 * replica, and the admin's limits on them.
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
  const { limits } = cluster;
  const typed = roles.some(role =>
    getIn(draft, `replicas.${role}.resources.gpu_type`)
  );
  const gpuTypes = limits.gpu_types.length > 0 || typed;
  const replicaSchema = schemaAt(schema, 'replicas.worker') ?? {};
  const column = (key: string) => {
    const node =
      key === 'count'
        ? replicaSchema.properties?.count
        : schemaAt(schema, `replicas.worker.resources.${key}`);
    return node?.description ?? '';
  };
  const cell = (
    role: string,
    key: string,
    type: 'integer' | 'text',
    max?: number | null
  ) => {
    const path = `replicas.${role}.${key}`;
    const value = getIn(draft, path);
    return (
      <td>
        <input
          className="jp-mod-styled"
          aria-label={`${role} ${key.replace('resources.', '')}`}
          type={type === 'integer' ? 'number' : 'text'}
          min={type === 'integer' ? 0 : undefined}
          max={max ?? undefined}
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
            {gpuTypes && <th title={column('gpu_type')}>GPU type</th>}
            <th title={column('cpu')}>CPU</th>
            <th title={column('memory')}>Memory</th>
          </tr>
        </thead>
        <tbody>
          {roles.map(role => (
            <tr key={role} data-role={role}>
              <td>{role}</td>
              {distributed &&
                cell(role, 'count', 'integer', limits.max_replicas)}
              {cell(
                role,
                'resources.gpus',
                'integer',
                limits.max_gpus_per_replica
              )}
              {gpuTypes && (
                <GpuTypeCell
                  role={role}
                  types={limits.gpu_types}
                  value={getIn(draft, `replicas.${role}.resources.gpu_type`)}
                  onChange={value =>
                    onChange(
                      setIn(draft, `replicas.${role}.resources.gpu_type`, value)
                    )
                  }
                />
              )}
              {cell(role, 'resources.cpu', 'text')}
              {cell(role, 'resources.memory', 'text')}
            </tr>
          ))}
        </tbody>
      </table>
      <Limit note={limitNote(limits, 'replicas')} />
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

/** The admin's GPU type a role's replicas run on: any GPU node, or one type. */
function GpuTypeCell(props: {
  role: string;
  types: string[];
  value?: string;
  onChange: (value: string | undefined) => void;
}): JSX.Element {
  const { role, types, value } = props;
  return (
    <td>
      <select
        className="jp-mod-styled"
        aria-label={`${role} gpu type`}
        value={value ?? ''}
        onChange={event => props.onChange(event.target.value || undefined)}
      >
        <option value="">any</option>
        {choicesWith(types, value).map(type => (
          <option key={type} value={type}>
            {type}
          </option>
        ))}
      </select>
    </td>
  );
}
