import * as React from 'react';

import { Cluster } from '../api';
import { choicesWith, Draft, Schema, schemaAt, setIn } from '../spec';
import { Errors, errorsUnder, Limit } from './fields';
import { limitNote } from './limits';

/**
 * None, one of the volumes the backend offers (with a sub-directory), or a
 * directory of this host, as the schema's `oneOf` allows and where the admin's
 * rules allow any; with either, where the code finds it too (link_as).
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
  // Another volume or a host directory keeps where the code finds it.
  const linkAs = value?.link_as ? { link_as: value.link_as } : {};
  const choose = (choice: string) =>
    onChange(
      choice === 'none'
        ? undefined
        : choice === 'host_path'
          ? { host_path: hostPaths?.[0] ?? '/', ...linkAs }
          : { volume: choice.slice('volume:'.length), ...linkAs }
    );
  const messages = errorsUnder(props.errors, path, [`${path}.link_as`]);
  return (
    <>
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
            onChange={event =>
              onChange({ ...value, host_path: event.target.value })
            }
          />
        )}
        {node.description && (
          <div className="jp-distrain-help">{node.description}</div>
        )}
        {kind === 'host_path' && (
          <Limit note={limitNote(cluster.limits, path)} />
        )}
        <Errors messages={messages} />
      </div>
      {kind !== 'none' && (
        <LinkAsField
          schema={schema}
          path={path}
          value={value?.link_as}
          onChange={linkAs => onChange(setIn(value ?? {}, 'link_as', linkAs))}
          errors={props.errors.get(`${path}.link_as`)}
        />
      )}
    </>
  );
}

/**
 * Where the code finds the volume's directory too (`link_as`), a path relative
 * to its working copy; none: only at the volume's own place.
 */
function LinkAsField(props: {
  schema: Schema;
  path: string;
  value?: string;
  onChange: (value: string) => void;
  errors?: string[];
}): JSX.Element {
  const { schema, path } = props;
  const node = schemaAt(schema, `${path}.link_as`) ?? {};
  const help = React.useId();
  return (
    <div
      className={`jp-distrain-field jp-distrain-link-as${props.errors?.length ? ' jp-mod-error' : ''}`}
      data-field={`${path}.link_as`}
    >
      <label>
        <span className="jp-distrain-label">{node.title ?? 'Link as'}</span>
        <input
          className="jp-mod-styled"
          aria-label={`${schemaAt(schema, path)?.title}: link as`}
          aria-describedby={help}
          aria-invalid={Boolean(props.errors?.length) || undefined}
          placeholder={`optional, e.g. ${path}`}
          spellCheck={false}
          autoComplete="off"
          value={props.value ?? ''}
          onChange={event => props.onChange(event.target.value)}
        />
      </label>
      {node.description && (
        <div id={help} className="jp-distrain-help">
          {node.description}
        </div>
      )}
      <Errors messages={props.errors} />
    </div>
  );
}
