/**
 * The search of a job's whole log on the server, and its hits, each of which
 * opens its line in the log view.
 */
import * as React from 'react';

import { jobsAPI, LogHit, LogHits } from './api';

/** A search of the whole log on the server: under way, answered, or failed. */
export interface IFound {
  query: string;
  hits?: LogHits;
  error?: string;
}

/**
 * The whole log's search (the run shown, the replica shown or all): what it
 * found, and what searches it for a query ('' forgets the last).
 */
export function useWholeSearch(
  name: string,
  replica: string,
  run: number | undefined
): [IFound | null, (query: string) => void] {
  const [found, setFound] = React.useState<IFound | null>(null);
  const latest = React.useRef('');
  const search = (query: string) => {
    latest.current = query;
    if (!query) {
      setFound(null);
      return;
    }
    setFound({ query });
    const answered = (result: Omit<IFound, 'query'>) => {
      if (latest.current === query) {
        setFound({ query, ...result });
      }
    };
    jobsAPI
      .searchLogs(name, { q: query, replica: replica || undefined, run })
      .then(
        hits => answered({ hits }),
        (error: Error) => answered({ error: error.message })
      );
  };
  return [found, search];
}

/** The whole log's hits, each a button that shows its line among those around it. */
export function LogHitList(props: {
  found: IFound;
  onOpen: (hit: LogHit) => void;
  onClose: () => void;
}): JSX.Element {
  const { query, hits, error } = props.found;
  const said = error
    ? error
    : !hits
      ? `Searching the whole log for “${query}”…`
      : `${hits.hits.length}${hits.complete ? '' : ' (the first)'} lines of the whole log hold “${query}”`;
  return (
    <section
      className="jp-distrain-log-hits"
      aria-label="Hits in the whole log"
    >
      <div className="jp-distrain-log-hits-head">
        <span role="status">{said}</span>
        <button
          className="jp-Button jp-mod-minimal"
          aria-label="Close the hits"
          title="Close the hits"
          onClick={props.onClose}
        >
          ×
        </button>
      </div>
      <ul>
        {hits?.hits.map(hit => (
          <li key={`${hit.replica}:${hit.offset}`}>
            <button
              className="jp-distrain-log-hit"
              onClick={() => props.onOpen(hit)}
            >
              <span className="jp-distrain-logreplica">[{hit.replica}]</span>{' '}
              <span className="jp-distrain-logtime">
                {hit.time.slice(11, 19)}
              </span>{' '}
              <Highlighted text={hit.text} query={query} />
            </button>
          </li>
        ))}
      </ul>
    </section>
  );
}

/** `text` with the first match of `query` (any case) marked. */
export function Highlighted(props: {
  text: string;
  query: string;
}): JSX.Element {
  const at = props.query
    ? props.text.toLowerCase().indexOf(props.query.toLowerCase())
    : -1;
  if (at < 0) {
    return <>{props.text}</>;
  }
  const end = at + props.query.length;
  return (
    <>
      {props.text.slice(0, at)}
      <mark>{props.text.slice(at, end)}</mark>
      {props.text.slice(end)}
    </>
  );
}
