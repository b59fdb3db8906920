// Runs the npm package gpt-3-encoder's own encoder on a text file and writes one id per line.
//   node gpt2_node_encode.js PATH/TO/Encoder.js TEXT_FILE OUT_FILE
// The package concatenates ids with Array.concat per piece, which is quadratic on a whole book, so
// the text is cut into chunks first, only between a letter and one of . , ; : ! ? A cut there cannot
// change any piece: GPT-2's pattern has no lookbehind, so matching from the cut is unchanged, and the
// letter run before it ends at the cut with or without the punctuation after it (a run is never
// whitespace, so no (?!\S) lookahead is involved). The C++ side encodes the file in one go.
const { encode } = require(process.argv[2]);
const fs = require('fs');
const text = fs.readFileSync(process.argv[3], 'utf-8');  // invalid UTF-8 -> U+FFFD, as node does
const ids = [];
for (const chunk of text.split(/(?<=\p{L})(?=[.,;:!?])/u)) for (const id of encode(chunk)) ids.push(id);
fs.writeFileSync(process.argv[4], ids.join('\n') + (ids.length ? '\n' : ''));
