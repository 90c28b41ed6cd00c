import { showErrorMessage } from '@jupyterlab/apputils';
import * as React from 'react';

import { Job, jobsAPI } from './api';
import { bytes } from './format';

/**
 * What the job's current run ran (its provenance): the code with the snapshot
 * of changes on top, the command as run, and the Python packages or the image,
 * as far as the backend knows them. "Reproduce" makes a new job from it.
 */
export function Provenance(props: {
  job: Job;
  openJob: (name: string) => void;
}): JSX.Element | null {
  const ran = props.job.provenance;
  if (!ran) {
    return null;
  }
  const reproduce = async () => {
    try {
      props.openJob((await jobsAPI.reproduce(props.job.name)).name);
    } catch (error) {
      await showErrorMessage(
        `Could not reproduce ${props.job.name}`,
        error as Error
      );
    }
  };
  const code = ran.code;
  return (
    <section className="jp-distrain-provenance">
      <h3>
        What ran
        <button
          className="jp-Button jp-mod-styled jp-mod-reject"
          title="A new job with the same code, changes, command and image"
          onClick={() => void reproduce()}
        >
          Reproduce
        </button>
      </h3>
      <dl className="jp-distrain-provenance-facts">
        <dt>Code</dt>
        <dd className="jp-distrain-mono">
          {code?.git ? `${code.git} @ ${code.commit}` : (code?.path ?? '–')}
        </dd>
        {ran.snapshot && (
          <>
            <dt>Your changes</dt>
            <dd>
              <span className="jp-distrain-mono">
                {ran.snapshot.sha256?.slice(0, 12)}
              </span>{' '}
              ({bytes(ran.snapshot.size ?? 0)})
              <ul className="jp-distrain-mono jp-distrain-snapshot-files">
                {(ran.snapshot.files ?? []).map(file => (
                  <li key={file}>{file}</li>
                ))}
              </ul>
            </dd>
          </>
        )}
        <dt>Command</dt>
        <dd className="jp-distrain-mono">{ran.command}</dd>
        {ran.python && (
          <>
            <dt>Python</dt>
            <dd>{ran.python}</dd>
          </>
        )}
        {ran.requirements && (
          <>
            <dt>Installed</dt>
            <dd className="jp-distrain-mono jp-distrain-requirements">
              {ran.requirements.join(' ') ||
                'nothing: the server has every requirement'}
            </dd>
          </>
        )}
        {ran.packages && (
          <>
            <dt>Packages</dt>
            <dd>
              <details>
                <summary>{ran.packages.length} packages</summary>
                <ul className="jp-distrain-mono jp-distrain-packages">
                  {ran.packages.map(p => (
                    <li key={p}>{p}</li>
                  ))}
                </ul>
              </details>
            </dd>
          </>
        )}
        {ran.image && (
          <>
            <dt>Image</dt>
            <dd className="jp-distrain-mono">
              {ran.image_digests?.length
                ? ran.image_digests.join(', ')
                : `${ran.image} (its digest once a pod reports it)`}
            </dd>
          </>
        )}
      </dl>
    </section>
  );
}
