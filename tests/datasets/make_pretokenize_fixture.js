// Writes tests/datasets/pretokenize_fixture.json: the pieces node's regex engine cuts texts into
// with the cl100k (Llama 3), Qwen2 and o200k patterns, \s read as Unicode White_Space as the Rust
// engines these patterns were written for do, so test_datasets checks the hand-written matchers
// (datasets/tiktoken_pretokenize.inl) without node or rank files. Regenerate:
//   node tests/datasets/make_pretokenize_fixture.js > tests/datasets/pretokenize_fixture.json
const ws = String.raw`\p{White_Space}`, notWs = String.raw`\P{White_Space}`;
const contractions = String.raw`(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])`;
const cl100k = digits => String.raw`${contractions}|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}${digits}| ?[^${ws}\p{L}\p{N}]+[\r\n]*|${ws}*[\r\n]+|${ws}+(?!${notWs})|${ws}+`;
const upper = String.raw`[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`, lower = String.raw`[\p{Ll}\p{Lm}\p{Lo}\p{M}]`;
const o200k = String.raw`[^\r\n\p{L}\p{N}]?${upper}*${lower}+${contractions}?|[^\r\n\p{L}\p{N}]?${upper}+${lower}*${contractions}?|\p{N}{1,3}| ?[^${ws}\p{L}\p{N}]+[\r\n/]*|${ws}*[\r\n]+|${ws}+(?!${notWs})|${ws}+`;
const patterns = { cl100k: cl100k('{1,3}'), qwen2: cl100k(''), o200k: o200k };
// GPT-2's fixture texts, and more that these patterns treat differently.
const texts = require('./gpt2_fixture.json').map(entry => entry.text).concat([
  "DON'T SHOUT'S I'M", "a.\nb", ".\n\n/x", "x//\n/y", "CamelCaseWord HTTPServer iPhone", "ǅungla ǈudevit",
  "\u0301 combining first", "e\u0301\u0302 stacked", "ʰmodifier ʰA", "देवनागरी लिपि", "ﬁligature", "bom\ufeffhere",
  "nel\u0085here", "\r\n\r\nwindows\r\nlines", "  \t \u00a0 mixed   runs   x", "١٢٣٤ arabic digits",
  "won't can't I'D YOU'RE We'Ll", "...", "a  \n\n  b", "((x))\n", "x\u0300\u0300y", "ㄱㄴㄷ 한국어", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
]);
const out = [];
for (const text of texts) {
  const entry = { text };
  for (const [name, pattern] of Object.entries(patterns)) entry[name] = text.match(new RegExp(pattern, 'gu')) ?? [];
  out.push(entry);
}
process.stdout.write(JSON.stringify(out).replace(/\},\{/g, '},\n{') + '\n');
