import type { Repo } from '../api';
import schema from '../../jupyter_distrain/job.schema.json';
import {
  assignErrors,
  choicesWith,
  isDistributed,
  jobName,
  leadRole,
  parseValue,
  prefill,
  rolesFor,
  schemaAt,
  setIn,
  soleRole,
  specForFile,
  distributedReplicas,
  replicasFor,
  withRef,
  writesEventFiles
} from '../spec';

const COMMIT = 'a'.repeat(40);

const CODE = {
  git: 'https://example.com/me/project.git',
  ref: 'main',
  commit: COMMIT
};

/** A repository's files: its distrain.yaml with `spec`, found at `path`. */
function withSpecFile(
  spec: object,
  path = '/home/me/work/project/distrain.yaml'
): Repo['files'] {
  return { 'distrain.yaml': { path, content: '', truncated: false, spec } };
}

function repo(
  overrides: Partial<Repo> = {},
  git: Partial<NonNullable<Repo['git']>> = {}
): Repo {
  return {
    path: 'work/project/train.ipynb',
    directory: '/home/me/work/project',
    git: {
      root: '/home/me/work/project',
      subdirectory: '.',
      remotes: [{ name: 'origin', url: CODE.git }],
      branch: 'main',
      commit: COMMIT,
      dirty: false,
      untracked: 0,
      upstream: 'origin/main',
      ahead: 0,
      behind: 0,
      ...git
    },
    files: {},
    code: CODE,
    notes: [],
    writes_event_files: false,
    last_job: null,
    ...overrides
  };
}

describe('schema lookups', () => {
  it('finds fields through references, maps and alternatives', () => {
    expect(schemaAt(schema, 'name')?.pattern).toBe(
      schema.properties.name.pattern
    );
    expect(schemaAt(schema, 'replicas.worker.count')?.maximum).toBe(64);
    expect(schemaAt(schema, 'replicas.ps.resources.gpus')?.type).toBe(
      'integer'
    );
    expect(schemaAt(schema, 'code.commit')?.title).toBe('Pinned commit');
    expect(schemaAt(schema, 'data')?.title).toBe('Input data');
    expect(schemaAt(schema, 'output.host_path')?.pattern).toMatch(/^\^\//);
    expect(schemaAt(schema, 'no.such.field')).toBeUndefined();
  });

  it('reads the roles of each framework from the schema rules', () => {
    expect(rolesFor(schema, 'tensorflow')).toEqual([
      'chief',
      'ps',
      'worker',
      'evaluator'
    ]);
    expect(rolesFor(schema, 'pytorch')).toEqual(['master', 'worker']);
    expect(rolesFor(schema, 'paddle')).toEqual(['ps', 'worker']);
    expect(rolesFor(schema, 'python')).toEqual(['worker']);
  });
});

describe('editing a draft', () => {
  it('sets nested values and removes what is emptied', () => {
    const draft = setIn({}, 'tensorboard.logdir', 'logs');
    expect(draft).toEqual({ tensorboard: { logdir: 'logs' } });
    expect(setIn(draft, 'tensorboard.logdir', '')).toEqual({});
    expect(setIn({ a: 1 }, 'b', undefined)).toEqual({ a: 1 });
    expect(setIn({ a: 1 }, 'b', 0)).toEqual({ a: 1, b: 0 });
  });

  it('keeps only the roles a framework allows, and at least a worker', () => {
    const replicas = { chief: { count: 1 }, worker: { count: 3 } };
    expect(replicasFor(schema, replicas, 'pytorch')).toEqual({
      worker: { count: 3 }
    });
    expect(replicasFor(schema, { chief: { count: 1 } }, 'python')).toEqual({
      worker: { count: 1 }
    });
  });

  it('switches between one worker and several roles', () => {
    const distributed = {
      replicas: {
        ps: { count: 1 },
        worker: { count: 2, resources: { gpus: 1 } }
      }
    };
    expect(isDistributed(distributed)).toBe(true);
    const single = {
      replicas: distributedReplicas(distributed.replicas, false)
    };
    expect(single.replicas).toEqual({
      worker: { count: 1, resources: { gpus: 1 } }
    });
    expect(isDistributed(single)).toBe(false);
    // Ticking "Distributed" on a single worker makes it distributed at once.
    const again = { replicas: distributedReplicas(single.replicas, true) };
    expect(again.replicas).toEqual({
      worker: { count: 2, resources: { gpus: 1 } }
    });
    expect(isDistributed(again)).toBe(true);
    expect(distributedReplicas(distributed.replicas, true)).toEqual(
      distributed.replicas
    );
  });

  it("gives a single replica its framework's lead role: PyTorch's master", () => {
    expect(leadRole('pytorch')).toBe('master');
    expect(leadRole('tensorflow')).toBe('worker');
    const one = { worker: { count: 1, resources: { gpus: 1 } } };
    const master = replicasFor(schema, one, 'pytorch');
    expect(master).toEqual({ master: { count: 1, resources: { gpus: 1 } } });
    expect(replicasFor(schema, master, 'tensorflow')).toEqual(one);
    // the table shows the role the draft has, else the framework's lead
    expect(soleRole(master, 'pytorch')).toBe('master');
    expect(soleRole({ worker: { count: 1 } }, 'pytorch')).toBe('worker');
    expect(soleRole(undefined, 'pytorch')).toBe('master');
    const ddp = { ...master, worker: { count: 2 } };
    expect(distributedReplicas(ddp, false, 'master')).toEqual(master);
    expect(distributedReplicas(master, true, 'master')).toEqual({
      ...master,
      worker: { count: 2 }
    });
  });

  it('unpins the commit, and the snapshot taken on it, when the ref changes', () => {
    const pinned = { ...CODE, snapshot: { commit: 'b'.repeat(40) } };
    expect(withRef(pinned, 'v2')).toEqual({ git: CODE.git, ref: 'v2' });
    expect(withRef({ ...CODE, changes_from: '/me' }, '')).toEqual({
      git: CODE.git,
      changes_from: '/me'
    });
  });

  it('reads hyperparameter values as numbers and booleans when they are', () => {
    expect(parseValue('0.01')).toBe(0.01);
    expect(parseValue('true')).toBe(true);
    expect(parseValue('adam')).toBe('adam');
    expect(parseValue('')).toBe('');
  });
});

describe('server errors', () => {
  it('land on the closest field shown, the rest are general', () => {
    const { byField, general } = assignErrors(
      [
        { path: 'name', message: 'bad name' },
        { path: 'replicas.worker.resources.gpus', message: 'too many' },
        { path: 'code.git.extra', message: 'odd' },
        { path: '', message: 'broken' },
        { path: 'mystery', message: 'unknown' }
      ],
      ['name', 'replicas.worker', 'code.git']
    );
    expect(byField.get('name')).toEqual(['bad name']);
    expect(byField.get('replicas.worker')).toEqual(['too many']);
    expect(byField.get('code.git')).toEqual(['odd']);
    expect(general).toEqual(['broken', 'mystery: unknown']);
  });
});

describe('prefill from the notebook repository', () => {
  it("takes the server's code and notes as they are", () => {
    const notes = ['Uncommitted work (changed files) is not part of the job'];
    const {
      spec,
      notes: shown,
      specFile
    } = prefill(repo({ notes }), 'work/project/train.ipynb');
    expect(spec.code).toEqual(CODE);
    expect(shown).toEqual(notes);
    expect(spec.name).toBe('train');
    expect(spec.command).toBe('ipython train.ipynb');
    expect(specFile).toBe('work/project/distrain.yaml');
  });

  it('offers to include the checkout only when it has work not pushed', () => {
    expect(prefill(repo(), 'work/project/train.ipynb').changes).toBeUndefined();
    for (const unsaved of [{ dirty: true }, { untracked: 2 }, { ahead: 1 }]) {
      expect(
        prefill(repo({}, unsaved), 'work/project/train.ipynb').changes
      ).toBe('/home/me/work/project');
    }
    const directory = repo(
      { code: { path: '/home/me/work/project' } },
      { dirty: true }
    );
    expect(
      prefill(directory, 'work/project/train.ipynb').changes
    ).toBeUndefined();
  });

  it('runs a notebook below the repository root from there', () => {
    const nested = repo(
      { directory: '/home/me/work/project/nb' },
      { subdirectory: 'nb' }
    );
    expect(prefill(nested, 'work/project/nb/My Model.ipynb').spec.command).toBe(
      "ipython 'nb/My Model.ipynb'"
    );
  });

  it("loads the repository's distrain.yaml, saving it back where it was found", () => {
    const found = repo(
      {
        directory: '/home/me/work/project/nb',
        files: withSpecFile({
          name: 'from-file',
          command: 'python train.py',
          code: { path: 'src' }
        })
      },
      { subdirectory: 'nb' }
    );
    const { spec, specFile } = prefill(found, 'work/project/nb/train.ipynb');
    expect(spec.name).toBe('from-file');
    expect(spec.code).toEqual({ path: '/home/me/work/project/src' });
    expect(specFile).toBe('work/project/distrain.yaml');
  });

  it("runs the server's code when distrain.yaml names none", () => {
    const found = repo({
      files: withSpecFile({ name: 'from-file', command: 'python train.py' })
    });
    expect(prefill(found, 'work/project/train.ipynb').spec).toEqual({
      name: 'from-file',
      command: 'python train.py',
      code: CODE
    });
  });

  it("starts from the repository's last job, on the checkout of now, where it has no distrain.yaml", () => {
    const replicas = {
      master: { count: 1, resources: { gpus: 0 } },
      worker: { count: 3, resources: { gpus: 0 } }
    };
    const policy = {
      success: 'chief' as const,
      restart: 'never' as const,
      max_restarts: 0,
      deadline_seconds: null,
      ttl_after_finished: null,
      hang_after: null,
      on_hang: 'warn' as const
    };
    const last: Repo['last_job'] = {
      name: 'ddp',
      backend: 'kubernetes',
      next_name: 'ddp-2',
      spec: {
        name: 'ddp',
        framework: 'pytorch',
        code: { ...CODE, commit: 'b'.repeat(40) },
        command: 'python train.py --lr {{ lr }}',
        hyperparameters: { lr: 0.1 },
        replicas,
        tensorboard: { enabled: false, logdir: 'tb' },
        policy,
        resume_from: 'job:older',
        trial_of: 'sweep'
      }
    };
    const filled = prefill(
      repo({ last_job: last, writes_event_files: true }),
      'work/project/train.ipynb'
    );
    expect(filled.spec).toEqual({
      name: 'ddp-2',
      framework: 'pytorch',
      command: 'python train.py --lr {{ lr }}',
      hyperparameters: { lr: 0.1 },
      replicas,
      tensorboard: { enabled: false, logdir: 'tb' },
      policy,
      code: CODE
    });
    expect(filled.backend).toBe('kubernetes');
    expect(filled.from).toBe('ddp');
    const file = {
      path: '/home/me/work/project/distrain.yaml',
      content: '',
      truncated: false,
      spec: { name: 'from-file', command: 'python train.py' }
    };
    const withFile = prefill(
      repo({ last_job: last, files: { 'distrain.yaml': file } }),
      'work/project/train.ipynb'
    );
    expect(withFile.spec.name).toBe('from-file');
    expect(withFile.from).toBeUndefined();
    expect(withFile.backend).toBeUndefined();
  });

  it('turns TensorBoard on where the code writes event files, unless the spec says', () => {
    const notebook = 'work/project/train.ipynb';
    expect(
      prefill(repo({ writes_event_files: true }), notebook).spec.tensorboard
    ).toEqual({ enabled: true });
    expect(prefill(repo(), notebook).spec.tensorboard).toBeUndefined();
    const file = (spec: object) => withSpecFile(spec, '/f');
    const says = { name: 'f', tensorboard: { enabled: false } };
    expect(
      prefill(repo({ files: file(says), writes_event_files: true }), notebook)
        .spec.tensorboard
    ).toEqual({ enabled: false });
    const command = { name: 'f', command: 'fit --logdir {{logdir}}' };
    expect(
      prefill(repo({ files: file(command) }), notebook).spec.tensorboard
    ).toEqual({ enabled: true });
    expect(writesEventFiles('python fit.py --logdir {{ logdir }}')).toBe(true);
    expect(writesEventFiles('tensorboard --logdir "$DISTRAIN_LOG_DIR"')).toBe(
      true
    );
    expect(writesEventFiles('python fit.py --out {{ output }}')).toBe(false);
    expect(writesEventFiles(undefined)).toBe(false);
  });

  it('names a job for a directory outside git after the directory', () => {
    const code = { path: '/home/me/work/project' };
    const { spec } = prefill(repo({ git: null, code }), 'work/project');
    expect(spec.code).toEqual(code);
    expect(spec.name).toBe('project');
    expect(spec.command).toBe('');
  });

  it('saves specs with nothing of this machine or moment', () => {
    const changes = { changes_from: '/home/me/project', snapshot: {} };
    expect(
      specForFile(
        {
          name: 'x',
          code: {
            git: 'https://h/r.git',
            ref: 'main',
            commit: COMMIT,
            ...changes
          }
        },
        '/home/me/project'
      )
    ).toEqual({ name: 'x', code: { git: 'https://h/r.git', ref: 'main' } });
    const saved = (path: string) =>
      specForFile({ code: { path } }, '/home/me/project').code;
    expect(saved('/home/me/project')).toEqual({ path: '.' });
    expect(saved('/home/me/project/src')).toEqual({ path: './src' });
    expect(saved('/home/me/project-b')).toEqual({ path: '/home/me/project-b' });
    const repository = { git: '/home/me/project', ref: 'main' }; // one without a remote
    expect(specForFile({ code: repository }, '/home/me/project').code).toEqual({
      git: '.',
      ref: 'main'
    });
    expect(specForFile({ name: 'x' }, '/home/me')).toEqual({ name: 'x' });
  });

  it('reads the directories of distrain.yaml relative to it', () => {
    const found = repo({
      files: withSpecFile({
        name: 'f',
        code: { git: '.', changes_from: './nb' }
      })
    });
    const filled = prefill(found, 'work/project/train.ipynb');
    expect(filled.spec.code.git).toBe('/home/me/work/project');
    expect(filled.spec.code.changes_from).toBe('/home/me/work/project/nb');
    expect(filled.specDirectory).toBe('/home/me/work/project');
  });
});

describe('job names', () => {
  it('are made valid from any text', () => {
    expect(jobName('My Model v2.ipynb')).toBe('my-model-v2');
    expect(jobName('2024_experiment')).toBe('experiment');
    expect(jobName('___')).toBe('training');
    expect(jobName('a'.repeat(80)).length).toBe(50);
  });
});

describe('choices of a select', () => {
  it("keeps the draft's own value where the server does not offer it", () => {
    expect(choicesWith(['a100', 'h100'], undefined)).toEqual(['a100', 'h100']);
    expect(choicesWith(['a100', 'h100'], 'h100')).toEqual(['a100', 'h100']);
    expect(choicesWith(['a100'], 'v100')).toEqual(['a100', 'v100']);
    expect(choicesWith([], '')).toEqual([]);
  });
});
