// Encode throughput of @huggingface/tokenizers (npm) on a JSONL file of strings.
//
// Usage (from tests/): node ref/tok_bench_ref.mjs TOKENIZER_JSON INPUT.jsonl [ROUNDS]
// Prints one line: "<impl>\t<MB>\t<seconds>\t<MB/s>" for the best of ROUNDS passes (encode
// only). A fresh Tokenizer per pass, so its word cache starts cold each time, as ours has none.
import fs from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";

const json = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const lines = fs.readFileSync(process.argv[3], "utf8").split("\n").filter((l) => l).map((l) => JSON.parse(l));
const rounds = Number(process.argv[4] ?? 3);
const mb = lines.reduce((n, l) => n + Buffer.byteLength(l, "utf8"), 0) / 1e6;
const version = JSON.parse(fs.readFileSync(new URL("../node_modules/@huggingface/tokenizers/package.json", import.meta.url))).version;
let best = Infinity;
for (let r = 0; r < rounds; r++) {
  const tok = new Tokenizer(json, {});
  const t0 = process.hrtime.bigint();
  for (const l of lines) tok.encode(l, { add_special_tokens: false });
  best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
}
console.log(`@huggingface/tokenizers ${version} (JS)\t${mb.toFixed(2)}\t${best.toFixed(3)}\t${(mb / best).toFixed(2)}`);
