import * as React from 'react';

import { Schema, schemaAt } from '../spec';
import { Field, Section } from './fields';

/** Top-level fields with a place in the layout; any other is drawn under "more". */
const PLACED = [
  'code',
  'name',
  'framework',
  'command',
  'image',
  'queue',
  'replicas',
  'hyperparameters',
  'env',
  'data',
  'output',
  'tensorboard',
  'policy',
  'progress'
];

/** Each field of the object at `parent` ("tensorboard", "policy"), as its schema lists them. */
export function ObjectFields(props: {
  schema: Schema;
  parent: string;
  field: Field;
}): JSX.Element {
  const node = schemaAt(props.schema, props.parent);
  return (
    <>
      {Object.keys(node?.properties ?? {}).map(key =>
        props.field(`${props.parent}.${key}`)
      )}
    </>
  );
}

/**
 * The restart policy, which hyperparameters say the job's length (progress),
 * then every top-level field without a place of its own (nor one given to it:
 * `placed`), folded.
 */
export function MoreFields(props: {
  schema: Schema;
  field: Field;
  placed: string[];
}): JSX.Element {
  const { schema, field } = props;
  const others = Object.keys(schema.properties).filter(
    key => !PLACED.includes(key) && !props.placed.includes(key)
  );
  return (
    <details className="jp-distrain-section">
      <summary>{schemaAt(schema, 'policy')?.title} and more</summary>
      <ObjectFields schema={schema} parent="policy" field={field} />
      <Section title={schemaAt(schema, 'progress')?.title}>
        <ObjectFields schema={schema} parent="progress" field={field} />
      </Section>
      {others.map(key => field(key))}
    </details>
  );
}
