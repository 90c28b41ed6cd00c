import { envChanges, envOf, envPath, envRows, overridden } from '../envrows';

describe('envRows', () => {
  it('lists the job env first, then each role env in the replicas order', () => {
    const rows = envRows({
      env: { A: 'x', N: 3 },
      replicas: { ps: { count: 1, env: { B: true } }, worker: { count: 2 } }
    });
    expect(rows.map(({ role, name, text }) => [role, name, text])).toEqual([
      ['', 'A', 'x'],
      ['', 'N', '3'],
      ['ps', 'B', 'true']
    ]);
  });
});

describe('envOf', () => {
  it('sends values as typed, a loaded number or boolean as such while unchanged', () => {
    const rows = envRows({ env: { N: 3, B: false } });
    expect(envOf(rows, '')).toEqual({ N: 3, B: false });
    rows[0].text = '007';
    expect(envOf(rows, '')).toEqual({ N: '007', B: false });
  });

  it('skips unnamed rows; a later row wins; no rows is no env', () => {
    const rows = [
      { role: '', name: '', text: 'x' },
      { role: '', name: 'A', text: '1' },
      { role: '', name: 'A', text: '2' },
      { role: 'worker', name: 'A', text: '{{ lr }}' }
    ];
    expect(envOf(rows, '')).toEqual({ A: '2' });
    expect(envOf(rows, 'worker')).toEqual({ A: '{{ lr }}' });
    expect(envOf(rows, 'ps')).toBeUndefined();
    expect([...overridden(rows)]).toEqual([1]);
  });
});

describe('envChanges', () => {
  const draft = { replicas: { worker: { count: 2, env: { OLD: 'x' } } } };

  it('changes only what differs, for the roles shown', () => {
    const rows = [
      { role: '', name: 'A', text: 'a' },
      { role: 'worker', name: 'OLD', text: 'x' },
      { role: 'ps', name: 'P', text: 'p' }
    ];
    expect(envChanges(draft, rows, ['worker'])).toEqual([['env', { A: 'a' }]]);
    // a role without a replica yet: none of it, as its table row shows
    expect(envChanges(draft, rows, ['worker', 'ps'])).toEqual([
      ['env', { A: 'a' }],
      ['replicas.ps', { count: 0, env: { P: 'p' } }]
    ]);
  });

  it('removes what no row says any more', () => {
    expect(envChanges(draft, [], ['worker', 'ps'])).toEqual([
      ['replicas.worker.env', undefined]
    ]);
    expect(envChanges({}, [], ['worker'])).toEqual([]);
  });
});

describe('envPath', () => {
  it("names a row's field as the server's errors do", () => {
    expect(envPath({ role: '', name: 'A', text: '' })).toBe('env.A');
    expect(envPath({ role: 'ps', name: 'A', text: '' })).toBe(
      'replicas.ps.env.A'
    );
  });
});
