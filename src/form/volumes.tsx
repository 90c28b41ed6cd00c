import * as React from 'react';

import { Cluster } from '../api';
import { choicesWith, Draft, Schema, schemaAt, setIn } from '../spec';
import { Errors, errorsUnder, Limit } from './fields';
import { limitNote } from './limits';

/**
 * None, one of the volumes the backend offers (with a sub-directory), or a
 * directory of this host, as the schema's `oneOf` allows and where the admin's
 * rules allow any.
 */
export function VolumeField(props: {
  schema: Schema;
  path: string;
  cluster: Cluster;
  value?: Draft;
  onChange: (value: Draft | undefined) => void;
  errors: Map<string, string[]>;
}): JSX.Element {
  const { schema, path, cluster, value, onChange } = props;
  const node = schemaAt(schema, path) ?? {};
  const volumes = cluster.volumes ?? [];
  const kind = !value ? 'none' : 'host_path' in value ? 'host_path' : 'volume';
  const hostPaths = cluster.limits.host_paths;
  const offerHost = hostPaths === null || hostPaths.length > 0;
  const choose = (choice: string) =>
    onChange(
      choice === 'none'
        ? undefined
        : choice === 'host_path'
          ? { host_path: hostPaths?.[0] ?? '/' }
          : { volume: choice.slice('volume:'.length) }
    );
  const messages = errorsUnder(props.errors, path);
  return (
    <div
      className={`jp-distrain-field${messages.length ? ' jp-mod-error' : ''}`}
      data-field={path}
    >
      <label>
        <span className="jp-distrain-label">{node.title}</span>
        <select
          className="jp-mod-styled"
          value={kind === 'volume' ? `volume:${value?.volume}` : kind}
          onChange={event => choose(event.target.value)}
        >
          <option value="none">
            {path === 'output' ? "The job's own directory" : 'None'}
          </option>
          {choicesWith(volumes, value?.volume).map(volume => (
            <option key={volume} value={`volume:${volume}`}>
              Volume {volume}
            </option>
          ))}
          {(offerHost || kind === 'host_path') && (
            <option value="host_path">Host directory</option>
          )}
        </select>
      </label>
      {kind === 'volume' && (
        <input
          className="jp-mod-styled"
          aria-label={`${node.title} sub-directory`}
          placeholder="sub-directory (optional)"
          value={value?.path ?? ''}
          onChange={event =>
            onChange(setIn(value ?? {}, 'path', event.target.value))
          }
        />
      )}
      {kind === 'host_path' && (
        <input
          className="jp-mod-styled"
          aria-label={`${node.title} host directory`}
          value={value?.host_path ?? ''}
          onChange={event => onChange({ host_path: event.target.value })}
        />
      )}
      {node.description && (
        <div className="jp-distrain-help">{node.description}</div>
      )}
      {kind === 'host_path' && <Limit note={limitNote(cluster.limits, path)} />}
      <Errors messages={messages} />
    </div>
  );
}
