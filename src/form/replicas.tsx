import * as React from 'react';

import { Cluster } from '../api';
import {
  choicesWith,
  distributedReplicas,
  Draft,
  getIn,
  leadRole,
  parseValue,
  Schema,
  schemaAt
} from '../spec';
import { Errors, errorsUnder, Limit, SetDraft } from './fields';
import { gpusFree, gpusPerReplica, limitNote } from './limits';

/**
 * One replica (in its framework's lead role, PyTorch's master), or a count per
 * role when distributed, with GPUs (how many the backend has free, at most what
 * one replica could get there; a GPU type where the admin names some), CPU and
 * memory per replica, and the admin's limits on them. A role's errors are in
 * the table, under its row.
 */
export function ReplicaFields(props: {
  schema: Schema;
  cluster: Cluster;
  draft: Draft;
  framework: string;
  /** The roles the table shows: the framework's when distributed, else the one replica's. */
  roles: string[];
  /** Whether the job is distributed, as the person chose. */
  distributed: boolean;
  setDistributed: (distributed: boolean) => void;
  set: SetDraft;
  errors: Map<string, string[]>;
}): JSX.Element {
  const { schema, cluster, draft, framework, roles, distributed, set } = props;
  const { errors } = props;
  const { limits } = cluster;
  const gpuTypes =
    limits.gpu_types.length > 0 ||
    roles.some(role => getIn(draft, `replicas.${role}.resources.gpu_type`));
  const columns = 4 + Number(distributed) + Number(gpuTypes);
  return (
    <>
      <DistributedSwitch
        checked={distributed}
        onChange={checked => {
          props.setDistributed(checked);
          set(
            'replicas',
            distributedReplicas(draft.replicas, checked, leadRole(framework))
          );
        }}
      />
      <table className="jp-distrain-replicas-form">
        <ReplicaHeader
          schema={schema}
          free={gpusFree(cluster)}
          distributed={distributed}
          gpuTypes={gpuTypes}
        />
        <tbody>
          {roles.map(role => (
            <React.Fragment key={role}>
              <ReplicaRow
                role={role}
                maxReplicas={limits.max_replicas}
                maxGpus={gpusPerReplica(cluster)}
                gpuTypes={gpuTypes ? limits.gpu_types : null}
                draft={draft}
                set={set}
                distributed={distributed}
                errors={errors}
              />
              <RoleErrors
                messages={roleErrors(errors, role)}
                columns={columns}
              />
            </React.Fragment>
          ))}
        </tbody>
      </table>
      <Limit note={limitNote(limits, 'replicas')} />
      <Errors messages={errors.get('replicas')} />
    </>
  );
}

/** A role's errors, but those of its environment variables (shown in theirs). */
function roleErrors(errors: Map<string, string[]>, role: string): string[] {
  return errorsUnder(errors, `replicas.${role}`, [`replicas.${role}.env`]).map(
    message => `${role}: ${message}`
  );
}

/**
 * A role's errors, in a row of the table under the role's; brought into view
 * when they come while the person types in that role's row.
 */
function RoleErrors(props: {
  messages: string[];
  columns: number;
}): JSX.Element | null {
  const row = React.useRef<HTMLTableRowElement>(null);
  const said = props.messages.join('\n');
  React.useEffect(() => {
    if (row.current?.previousElementSibling?.contains(document.activeElement)) {
      row.current.scrollIntoView({ block: 'nearest' });
    }
  }, [said]);
  if (!said) {
    return null;
  }
  return (
    <tr ref={row} className="jp-distrain-replica-errors">
      <td colSpan={props.columns}>
        <Errors messages={props.messages} />
      </td>
    </tr>
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
  /** How many GPUs the backend has free, or that it has none. */
  free: string;
  /** Whether to show the count column, and the GPU type's. */
  distributed: boolean;
  gpuTypes: boolean;
}): JSX.Element {
  const { schema } = props;
  const describe = (field: string) =>
    schemaAt(schema, `replicas.worker.${field}`)?.description ?? '';
  return (
    <thead>
      <tr>
        <th>Role</th>
        {props.distributed && <th title={describe('count')}>Count</th>}
        <th title={describe('resources.gpus')}>
          GPUs each <span className="jp-distrain-help">({props.free})</span>
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

/**
 * One role's count (when distributed) and resources per replica; `maxGpus` 0:
 * the backend has no GPU to give.
 */
function ReplicaRow(props: {
  role: string;
  maxReplicas: number | null;
  maxGpus: number | null;
  /** The admin's GPU types, where the table has their column. */
  gpuTypes: string[] | null;
  draft: Draft;
  set: SetDraft;
  distributed: boolean;
  errors: Map<string, string[]>;
}): JSX.Element {
  const { role, draft, set } = props;
  const gpuType = `replicas.${role}.resources.gpu_type`;
  const input = (key: string, max: number | null = null, none?: string) => (
    <ReplicaInput
      role={role}
      field={key}
      max={max}
      none={none}
      draft={draft}
      set={set}
      invalid={props.errors.has(`replicas.${role}.${key}`)}
    />
  );
  return (
    <tr data-role={role}>
      <td>{role}</td>
      {props.distributed && input('count', props.maxReplicas)}
      {input(
        'resources.gpus',
        props.maxGpus,
        props.maxGpus === 0 ? 'none on this backend' : undefined
      )}
      {props.gpuTypes && (
        <GpuTypeCell
          role={role}
          types={props.gpuTypes}
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
 * has one. `none`: why the field can take nothing but 0, said in it.
 */
function ReplicaInput(props: {
  role: string;
  field: string;
  max: number | null;
  none?: string;
  draft: Draft;
  set: SetDraft;
  invalid: boolean;
}): JSX.Element {
  const { role, field, set } = props;
  const path = `replicas.${role}.${field}`;
  const integer = field === 'count' || field === 'resources.gpus';
  return (
    <td>
      <input
        className="jp-mod-styled"
        aria-label={`${role} ${field.replace('resources.', '')}`}
        aria-description={props.none}
        aria-invalid={props.invalid || undefined}
        title={props.none}
        type={integer ? 'number' : 'text'}
        min={integer ? 0 : undefined}
        max={props.max ?? undefined}
        value={getIn(props.draft, path) ?? ''}
        placeholder={props.none ?? (integer ? '0' : 'any')}
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
