// Reference for tokenizer.json: @huggingface/tokenizers (npm), a pure-JS port of HF tokenizers.
//
// Usage (from tests/, after `npm ci --ignore-scripts`):
//   node ref/tok_ref_hf.mjs TOKENIZER_JSON < strings.jsonl > out.jsonl
// Each input line is a JSON string; each output line is {"ids": [...], "text": decode(ids)},
// encoded without special tokens and decoded without clean-up (as tokenizers' Rust decode).
import fs from "node:fs";
import readline from "node:readline";
import { Tokenizer } from "@huggingface/tokenizers";

const json = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const tok = new Tokenizer(json, {});
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
const out = [];
for await (const line of rl) {
  const ids = tok.encode(JSON.parse(line), { add_special_tokens: false }).ids;
  const text = ids.length ? tok.decode(ids, { clean_up_tokenization_spaces: false }) : "";
  out.push(JSON.stringify({ ids, text }));
  if (out.length >= 1024) process.stdout.write(out.splice(0).join("\n") + "\n");
}
if (out.length) process.stdout.write(out.join("\n") + "\n");
