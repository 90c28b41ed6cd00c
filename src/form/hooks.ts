import * as React from 'react';

import {
  Backend,
  Cluster,
  FieldError,
  fieldErrors,
  JobSpec,
  jobsAPI,
  serverAPI
} from '../api';
import { Draft, prefill, Schema, setIn } from '../spec';
import { SetDraft } from './fields';
import { copyNotes } from './pinned';

/** How long typing pauses before the server checks the spec. */
const VALIDATE_DELAY_MS = 300;

/** What a form starts from: the code around a notebook or directory, or a job to clone. */
export interface IFormSource {
  /** The notebook or directory whose code the job trains, relative to the Jupyter root. */
  path: string;
  /** A job to copy instead: its spec (same pinned code) under a free name, to edit. */
  clone?: string;
  /** A sweep whose best trial to fine-tune instead: its spec, resuming from its output. */
  finetune?: string;
  /** The backend chosen in the settings; empty or not enabled: the server's default. */
  backend?: string;
}

export interface ILoaded {
  schema: Schema;
  cluster: Cluster;
  spec: Draft;
  /** What to know about the code before training it. */
  notes: string[];
  /** The job a new job's form starts from: the repository's last. */
  from?: string;
  /** The job a clone or fine-tune copies: the cloned job, or the trial it resumes from. */
  copied?: string;
  /** Where "Save as" writes the spec; none for a clone. */
  specFile?: string;
  /** specFile's directory on the server. */
  specDirectory?: string;
  /** The backend the form starts on. */
  backend?: string;
  /** The checkout whose changes the job may include; for a clone, that of the changes it ran. */
  changes?: string;
  /** The job whose snapshot of changes the new one runs, if it has one: the cloned or fine-tuned job. */
  snapshotOf?: string;
}

async function start(source: IFormSource): Promise<ILoaded> {
  const [schema, cluster] = await Promise.all([
    serverAPI.schema(),
    serverAPI.cluster()
  ]);
  if (source.clone || source.finetune) {
    const spec = source.finetune
      ? await jobsAPI.finetuneSpec(source.finetune)
      : await jobsAPI.cloneSpec(source.clone!);
    // the fine-tuned trial is the one it resumes from: job:<name>
    const copied = source.clone ?? spec.resume_from!.slice('job:'.length);
    const job = await jobsAPI.get(copied);
    // a clone runs the changes the job ran, or takes a fresh snapshot of their checkout
    const changes =
      spec.code && 'git' in spec.code
        ? spec.code.snapshot?.checkout
        : undefined;
    return {
      schema,
      cluster,
      spec,
      notes: copyNotes(
        copied,
        spec.code && 'path' in spec.code ? spec.code.path : undefined
      ),
      backend: job.backend,
      changes,
      copied,
      snapshotOf: copied
    };
  }
  const filled = prefill(await serverAPI.repo(source.path), source.path);
  return { schema, cluster, ...filled };
}

/**
 * The draft spec and the backend it goes to, started from `source`, with the
 * schema and the chosen backend's cluster (its GPUs and volumes).
 */
export function useDraft(source: IFormSource) {
  const [loaded, setLoaded] = React.useState<ILoaded | null>(null);
  const [loadError, setLoadError] = React.useState('');
  const [draft, setDraft] = React.useState<Draft>({});
  const [backend, setBackend] = React.useState('');

  React.useEffect(() => {
    start(source)
      .then(started => {
        const wanted = started.backend ?? source.backend ?? '';
        setBackend(
          started.cluster.backends.includes(wanted as Backend)
            ? wanted
            : started.cluster.default_backend
        );
        setLoaded(started);
        setDraft(started.spec);
      })
      .catch(error => setLoadError(String(error.message ?? error)));
  }, [source.path, source.clone]);

  React.useEffect(() => {
    if (loaded && backend && backend !== loaded.cluster.backend) {
      serverAPI
        .cluster(backend)
        .then(cluster =>
          setLoaded(current => current && { ...current, cluster })
        )
        .catch(error => setLoadError(String(error.message ?? error)));
    }
  }, [backend, loaded]);

  const set: SetDraft = React.useCallback(
    (path, value) => setDraft(current => setIn(current, path, value)),
    []
  );

  return { loaded, loadError, draft, set, backend, setBackend };
}

/**
 * The server's verdict on the draft (a dry run: every error, or none, and what
 * would keep it waiting), asked
 * once typing pauses and only once the form has `started`; only the latest
 * answer counts. `checked`: the verdict is the current draft's.
 */
export function useDryRun(
  draft: Draft,
  backend: string,
  started: boolean,
  /** The job a clone copies, whose snapshot of changes the draft may run. */
  clone?: string
) {
  const [errors, setErrors] = React.useState<FieldError[]>([]);
  // What would keep the job waiting were it submitted now (an accepted draft's).
  const [warnings, setWarnings] = React.useState<FieldError[]>([]);
  const [checked, setChecked] = React.useState(false);
  const generation = React.useRef(0);

  React.useEffect(() => {
    if (!started) {
      return;
    }
    const current = ++generation.current;
    setChecked(false);
    const timer = setTimeout(() => {
      jobsAPI
        .check(draft as JobSpec, backend, clone)
        .then(verdict => [verdict.errors, verdict.warnings])
        .catch(error => [fieldErrors(error), []])
        .then(([found, warned]) => {
          if (current === generation.current) {
            setErrors(found);
            setWarnings(warned);
            setChecked(true);
          }
        });
    }, VALIDATE_DELAY_MS);
    return () => clearTimeout(timer);
  }, [draft, backend, started, clone]);

  return { errors, setErrors, warnings, checked };
}
