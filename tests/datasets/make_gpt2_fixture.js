// Writes tests/datasets/gpt2_fixture.json: (text, ids) pairs from the npm gpt-3-encoder package, so
// test_datasets checks our GPT-2 encoder without node. Regenerate:
//   node tests/datasets/make_gpt2_fixture.js ~/.cache/pipelane/gpt2/npm/Encoder.js > tests/datasets/gpt2_fixture.json
const { encode } = require(process.argv[2]);
const texts = [
  "Hello world", "Hello, world!", " leading space", "trailing space ", "two  spaces", "tabs\tand\nnewlines\n\n",
  "   three leading", "end with newlines\n\n\n", "I'm you're we've they'll he'd she's it't", "DON'T SHOUT'S",
  "numbers 1234567890 and 3.14159", "mixed abc123def 45x", "symbols: !@#$%^&*()_+-=[]{};'\"\\|,.<>/?`~",
  "emoji 😀👍🏽 and CJK 漢字かなカナ", "accents: café naïve résumé Ångström", "Ελληνικά и русский текст",
  "arabic: مرحبا بالعالم", "zero\u200bwidth and nbsp\u00a0here", "line\u2028separator", "\u3000ideographic space",
  "Roman numerals Ⅻ and fractions ½ ¾", "http://example.com/path?q=1&x=2#frag", "   ", "\n", "",
  "a", "'", "''", "'s", "x's", " 's", "?!?!", "  \n  \n", "word\n  indented", "<|endoftext|>",
  "The Jargon File is a glossary of hacker slang.", "foo_bar-baz.qux", "αβγ123δεζ", "\t\tx", "x\t\t",
];
process.stdout.write(JSON.stringify(texts.map(text => ({ text, ids: encode(text) })), null, 0)
  .replace(/\},\{/g, '},\n{') + '\n');
