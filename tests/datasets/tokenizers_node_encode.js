// Runs a tokenizer package's own JavaScript encoder over documents and writes their ids, for
// test_tokenizers_node.cpp to compare with ours:
//   node tokenizers_node_encode.js KIND TOKENIZERS_DIR DOCUMENTS.jsonl OUT.txt [TOKENIZER_JSON]
// KIND: cl100k, o200k (js-tiktoken), llama3 (llama3-tokenizer-js), llama2 (llama-tokenizer-js, for
// Llama 2's SentencePiece model), hf (@huggingface/tokenizers on TOKENIZER_JSON).
// DOCUMENTS.jsonl holds one JSON string per line; OUT.txt gets one line of ids per document.
// Special tokens' text is ordinary text everywhere, as in pipelane (js-tiktoken: nothing allowed or
// disallowed); no beginning- or end-of-text token is added.
const fs = require('fs');
const path = require('path');
const [kind, dir, documentsPath, outPath, tokenizerJson] = process.argv.slice(2);
const modules = path.join(dir, 'npm', 'node_modules');

async function encoderFor() {
  if (kind === 'cl100k' || kind === 'o200k') {
    const { Tiktoken } = require(path.join(modules, 'js-tiktoken/dist/lite.cjs'));
    const ranks = require(path.join(modules, `js-tiktoken/dist/ranks/${kind}_base.cjs`));
    const encoding = new Tiktoken(ranks.default ?? ranks);
    return text => encoding.encode(text, [], []);
  }
  if (kind === 'llama3') {
    const { llama3Tokenizer } = require(path.join(modules, 'llama3-tokenizer-js/bundle/commonjs-llama3-tokenizer-with-baked-data.cjs'));
    // A special-token pattern that matches nothing: their text is ordinary text, as for us.
    return text => llama3Tokenizer.encode(text, { bos: false, eos: false, specialTokenRegex: /(?!)/g });
  }
  if (kind === 'llama2') {
    const { default: llama2 } = await import(path.join(modules, 'llama-tokenizer-js/llama-tokenizer.js'));
    // With the beginning-of-text token, then without it: the package skips a first merge of rank 0
    // at position 0 (its priority 0 reads as "no merge"), which the token in front avoids.
    return text => llama2.encode(text, true, true).slice(1);
  }
  if (kind === 'hf') {
    const { Tokenizer } = require(path.join(modules, '@huggingface/tokenizers/dist/tokenizers.cjs'));
    const json = JSON.parse(fs.readFileSync(tokenizerJson, 'utf8'));
    // Special added tokens are not looked for in the text (their text is ordinary text, as for us);
    // the others are, as Hugging Face does.
    json.added_tokens = (json.added_tokens ?? []).filter(token => !token.special);
    const tokenizer = new Tokenizer(json, {});
    return text => tokenizer.encode(text, { add_special_tokens: false }).ids;
  }
  throw new Error(`unknown kind ${kind}`);
}

(async () => {
  const encode = await encoderFor();
  const documents = fs.readFileSync(documentsPath, 'utf8').split('\n').filter(Boolean).map(JSON.parse);
  const lines = documents.map(text => (text.length ? encode(text) : []).join(' '));
  fs.writeFileSync(outPath, lines.join('\n') + '\n');
})().catch(error => { console.error(error); process.exit(1); });
