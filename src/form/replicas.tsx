import * as React from 'react';

import { Cluster } from '../api';
import {
  choicesWith,
  distributedReplicas,
  Draft,
  getIn,
  isDistributed,
  parseValue,
  Schema,
  schemaAt
} from '../spec';
import { Errors, errorsUnder, Limit, SetDraft } from './fields';
import { limitNote, Limits } from './limits';

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
  set: SetDraft;
  errors: Map<string, string[]>;
}): JSX.Element {
  const { schema, cluster, draft, set } = props;
  // The person's choice: counts typed on the way (say, 1 worker before the ps)
  // do not flip it.
  const [distributed, setDistributed] = React.useState(() =>
    isDistributed(draft)
  );
  const roles = distributed ? props.roles : ['worker'];
  const { limits } = cluster;
  const gpuTypes =
    limits.gpu_types.length > 0 ||
    roles.some(role => getIn(draft, `replicas.${role}.resources.gpu_type`));
  return (
    <>
      <DistributedSwitch
        checked={distributed}
        onChange={checked => {
          setDistributed(checked);
          set('replicas', distributedReplicas(draft.replicas, checked));
        }}
      />
      <table className="jp-distrain-replicas-form">
        <ReplicaHeader
          schema={schema}
          gpus={cluster.gpus ?? { capacity: 0, available: 0 }}
          distributed={distributed}
          gpuTypes={gpuTypes}
        />
        <tbody>
          {roles.map(role => (
            <ReplicaRow
              key={role}
              role={role}
              limits={limits}
              draft={draft}
              set={set}
              distributed={distributed}
              gpuTypes={gpuTypes}
            />
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

function DistributedSwitch(props: {
  checked: boolean;
  onChange: (distributed: boolean) => void;
}): JSX.Element {
  return (
    <label className="jp-distrain-field jp-distrain-inline">
      <input
        type="checkbox"
        checked={props.checked}
        onChange={event => props.onChange(event.target.checked)}
      />
      <span className="jp-distrain-label">
        Distributed: several replicas, each in a role
      </span>
    </label>
  );
}

/** The columns' headings, each with its schema's description as its title. */
function ReplicaHeader(props: {
  schema: Schema;
  gpus: NonNullable<Cluster['gpus']>;
  /** Whether to show the count column, and the GPU type's. */
  distributed: boolean;
  gpuTypes: boolean;
}): JSX.Element {
  const { schema, gpus } = props;
  const describe = (field: string) =>
    schemaAt(schema, `replicas.worker.${field}`)?.description ?? '';
  return (
    <thead>
      <tr>
        <th>Role</th>
        {props.distributed && <th title={describe('count')}>Count</th>}
        <th title={describe('resources.gpus')}>
          GPUs each{' '}
          <span className="jp-distrain-help">
            ({gpus.available} of {gpus.capacity} free)
          </span>
        </th>
        {props.gpuTypes && (
          <th title={describe('resources.gpu_type')}>GPU type</th>
        )}
        <th title={describe('resources.cpu')}>CPU</th>
        <th title={describe('resources.memory')}>Memory</th>
      </tr>
    </thead>
  );
}

/** One role's count (when distributed) and resources per replica. */
function ReplicaRow(props: {
  role: string;
  limits: Limits;
  draft: Draft;
  set: SetDraft;
  distributed: boolean;
  gpuTypes: boolean;
}): JSX.Element {
  const { role, limits, draft, set } = props;
  const gpuType = `replicas.${role}.resources.gpu_type`;
  const input = (key: string, max?: number | null) => (
    <ReplicaInput role={role} field={key} max={max} draft={draft} set={set} />
  );
  return (
    <tr data-role={role}>
      <td>{role}</td>
      {props.distributed && input('count', limits.max_replicas)}
      {input('resources.gpus', limits.max_gpus_per_replica)}
      {props.gpuTypes && (
        <GpuTypeCell
          role={role}
          types={limits.gpu_types}
          value={getIn(draft, gpuType)}
          onChange={value => set(gpuType, value)}
        />
      )}
      {input('resources.cpu')}
      {input('resources.memory')}
    </tr>
  );
}

/**
 * A role's count or resource (`field`, under the role): counts and GPUs are
 * whole numbers, CPU and memory as typed. A count of none is a count of 0, sent
 * as such: the server runs no replica of that role, and says so when no role
 * has one.
 */
function ReplicaInput(props: {
  role: string;
  field: string;
  max?: number | null;
  draft: Draft;
  set: SetDraft;
}): JSX.Element {
  const { role, field, set } = props;
  const path = `replicas.${role}.${field}`;
  const integer = field === 'count' || field === 'resources.gpus';
  return (
    <td>
      <input
        className="jp-mod-styled"
        aria-label={`${role} ${field.replace('resources.', '')}`}
        type={integer ? 'number' : 'text'}
        min={integer ? 0 : undefined}
        max={props.max ?? undefined}
        value={getIn(props.draft, path) ?? ''}
        placeholder={integer ? '0' : 'any'}
        onChange={event => {
          const text = event.target.value;
          if (text === '') {
            set(path, field === 'count' ? 0 : undefined);
          } else {
            set(path, integer ? Number(text) : parseValue(text));
          }
        }}
      />
    </td>
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
