// Writes a model that can fill in the middle for tests/infill.spec.ts: the engine's
// Laneformer test fixture with three unused byte tokens renamed to FIM tokens.
// usage: node make-fim-model.mjs FIXTURE_DIR OUT_DIR
import * as fs from 'fs';
import * as path from 'path';

const [fixture, out] = process.argv.slice(2);
fs.rmSync(out, { recursive: true, force: true });
fs.cpSync(fixture, out, { recursive: true });
const file = path.join(out, 'tokenizer.json');
const tokenizer = JSON.parse(fs.readFileSync(file, 'utf8'));
const renames = { '<0x05>': '<fim_prefix>', '<0x06>': '<fim_suffix>', '<0x07>': '<fim_middle>' };
for (const [from, to] of Object.entries(renames)) {
  const id = tokenizer.model.vocab[from];
  if (id === undefined) throw new Error(`${file} has no token ${from}`);
  delete tokenizer.model.vocab[from];
  tokenizer.model.vocab[to] = id;
  tokenizer.added_tokens.push({ id, content: to, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
}
fs.writeFileSync(file, JSON.stringify(tokenizer));
