import * as React from 'react';

import { Backend, Cluster } from '../api';
import {
  choicesWith,
  Draft,
  replicasFor,
  Schema,
  schemaAt,
  writesEventFiles
} from '../spec';
import { Field, SchemaInput, SetDraft } from './fields';

/**
 * The job's name, where it runs, its framework, command and image, and with Kueue
 * its queue (the namespace's LocalQueues); changing the framework keeps only
 * the replica roles it allows; a command that writes event files turns
 * TensorBoard on, unless the person chose.
 */
export function JobFields(props: {
  schema: Schema;
  cluster: Cluster;
  draft: Draft;
  set: SetDraft;
  field: Field;
  backend: string;
  setBackend: (backend: string) => void;
}): JSX.Element {
  const { schema, cluster, draft, set, field, backend } = props;
  return (
    <>
      {field('name')}
      <BackendField
        backends={cluster.backends}
        value={backend}
        onChange={props.setBackend}
      />
      {field(
        'framework',
        <SchemaInput
          node={schemaAt(schema, 'framework') ?? {}}
          value={draft.framework}
          onChange={value => {
            const framework = String(value);
            set('framework', framework);
            set('replicas', replicasFor(schema, draft.replicas, framework));
          }}
        />
      )}
      {field(
        'command',
        <textarea
          className="jp-mod-styled jp-distrain-command"
          rows={3}
          value={draft.command ?? ''}
          onChange={event => {
            set('command', event.target.value);
            if (
              writesEventFiles(event.target.value) &&
              draft.tensorboard?.enabled === undefined
            ) {
              set('tensorboard.enabled', true);
            }
          }}
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
      {cluster.queues?.length || draft.queue
        ? field(
            'queue',
            <select
              className="jp-mod-styled"
              value={draft.queue ?? ''}
              onChange={event => set('queue', event.target.value)}
            >
              <option value="">none: start at once</option>
              {choicesWith(cluster.queues ?? [], draft.queue).map(name => (
                <option key={name} value={name}>
                  {name}
                </option>
              ))}
            </select>
          )
        : null}
    </>
  );
}

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
