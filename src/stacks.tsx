import * as React from 'react';

import { Frame, serverAPI, Stacks } from './api';

type StackReplica = Stacks['replicas'][number];
type StackThread = StackReplica['processes'][number]['threads'][number];

/**
 * "Where is it now?": the running replicas' stacks, taken at once (or, `kept`,
 * those kept when the job hung). The frames every replica shares are folded;
 * each replica's own follow side by side, the one elsewhere than most
 * highlighted. Taken when shown, again on request.
 */
export function StacksView(props: {
  name: string;
  kept?: boolean;
  onClose: () => void;
}): JSX.Element {
  const [stacks, setStacks] = React.useState<Stacks | null>(null);
  const [error, setError] = React.useState('');
  const [taking, setTaking] = React.useState(false);
  const take = React.useCallback(async () => {
    setTaking(true);
    try {
      setStacks(await serverAPI.stacks(props.name, props.kept));
      setError('');
    } catch (reason) {
      setError((reason as Error).message);
    } finally {
      setTaking(false);
    }
  }, [props.name, props.kept]);
  React.useEffect(() => {
    void take();
  }, [take]);
  return (
    <section
      className="jp-distrain-stacks"
      aria-label={props.kept ? 'Stacks when it hung' : 'Stacks'}
    >
      <h3>{props.kept ? 'Where it was when it hung' : 'Where is it now?'}</h3>
      {props.kept && stacks?.message && <p>{stacks.message}</p>}
      <div className="jp-distrain-stacks-toolbar">
        <span role="status">
          {taking ? 'Taking the stacks…' : stacks ? summary(stacks) : ''}
        </span>
        {!props.kept && (
          <button
            className="jp-Button jp-mod-styled jp-mod-reject"
            disabled={taking}
            onClick={() => void take()}
          >
            Take again
          </button>
        )}
        <button
          className="jp-Button jp-mod-styled jp-mod-reject"
          onClick={props.onClose}
        >
          Close
        </button>
      </div>
      {error && <div className="jp-distrain-error">{error}</div>}
      {stacks && <StackColumns stacks={stacks} />}
    </section>
  );
}

function summary(stacks: Stacks): string {
  const taken = new Date(stacks.taken).toLocaleTimeString();
  const differs = stacks.differs.length
    ? `; elsewhere than the others: ${stacks.differs.join(', ')}`
    : '';
  return `Taken at ${taken} in ${stacks.seconds.toFixed(2)} s${differs}`;
}

function StackColumns(props: { stacks: Stacks }): JSX.Element {
  const { shared, differs } = props.stacks;
  const first = props.stacks.replicas.find(r => r.frames.length);
  return (
    <>
      {shared > 0 && first && (
        <details className="jp-distrain-stacks-shared">
          <summary>
            {shared} {shared === 1 ? 'frame' : 'frames'} every replica shares
          </summary>
          <FrameList frames={first.frames.slice(0, shared)} />
        </details>
      )}
      <div className="jp-distrain-stacks-replicas" role="list">
        {props.stacks.replicas.map(replica => (
          <ReplicaStack
            key={replica.name}
            replica={replica}
            shared={shared}
            differs={differs.includes(replica.name)}
          />
        ))}
      </div>
    </>
  );
}

/** A replica's own frames after the shared ones, then its other threads. */
function ReplicaStack(props: {
  replica: StackReplica;
  shared: number;
  differs: boolean;
}): JSX.Element {
  const { replica, shared, differs } = props;
  const others = otherThreads(replica);
  return (
    <div
      role="listitem"
      aria-label={replica.name}
      data-replica={replica.name}
      className={`jp-distrain-stacks-replica${differs ? ' jp-mod-differs' : ''}`}
    >
      <h4>
        {replica.name}
        {differs && (
          <span className="jp-distrain-stacks-differs">
            elsewhere than the others
          </span>
        )}
      </h4>
      {replica.error && (
        <div className="jp-distrain-error">{replica.error}</div>
      )}
      <FrameList frames={replica.frames.slice(shared)} />
      {others.length > 0 && (
        <details>
          <summary>
            {others.length} other {others.length === 1 ? 'thread' : 'threads'}
          </summary>
          {others.map(({ pid, thread }) => (
            <div key={`${pid}-${thread.id}`}>
              <div className="jp-distrain-stacks-thread">
                {thread.name || thread.id} (pid {pid})
              </div>
              <FrameList frames={thread.frames} />
            </div>
          ))}
        </details>
      )}
    </div>
  );
}

/** Every thread of the replica but the one it is compared on (the server's rule: its last Python process's main thread). */
function otherThreads(
  replica: StackReplica
): { pid: number; thread: StackThread }[] {
  const processes = replica.processes;
  const compared = [...processes]
    .reverse()
    .find(p => p.threads.some(t => t.id === p.pid));
  return processes.flatMap(p =>
    p.threads
      .filter(t => !(p === compared && t.id === p.pid))
      .map(thread => ({ pid: p.pid, thread }))
  );
}

/** Frames, outermost first: a Python frame's function and line, a native one's library. */
function FrameList(props: { frames: Frame[] }): JSX.Element {
  return (
    <ol className="jp-distrain-frames jp-distrain-mono">
      {props.frames.map((frame, index) => (
        <li
          key={index}
          className={frame.native ? 'jp-distrain-frame-native' : undefined}
          title={frame.native ? frame.file : `${frame.file}:${frame.line}`}
        >
          <span className="jp-distrain-frame-function">{frame.function}</span>{' '}
          <span className="jp-distrain-frame-where">
            {frame.file.split('/').pop()}
            {frame.native ? '' : `:${frame.line}`}
          </span>
        </li>
      ))}
    </ol>
  );
}
