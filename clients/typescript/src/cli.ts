#!/usr/bin/env node
/**
 * ldp-sample: reports of one value drawn with WebCrypto randomness, for audits of this client's output.
 *
 *   node dist/src/cli.js --task TASK.json --value V --count N --out OUT.json
 *
 * OUT.json holds the wire parameters and the payload columns: `value` (integers), `seed` (decimal strings,
 * signed as in the JSON form), `bits` (base64) and `items` (integer arrays), each present when the
 * mechanism sets it.
 */

import { readFileSync, writeFileSync } from "node:fs";

import { toBase64 } from "./base64.js";
import { Client } from "./client.js";
import { CryptoSource } from "./random.js";

function parseArgs(argv: string[]): Map<string, string> {
  const out = new Map<string, string>();
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i];
    if (!key.startsWith("--") || i + 1 >= argv.length) throw new Error(`bad argument ${key}`);
    out.set(key.slice(2), argv[i + 1]);
  }
  for (const k of ["task", "value", "count", "out"]) if (!out.has(k)) throw new Error(`--${k} is required`);
  return out;
}

function main(): void {
  const args = parseArgs(process.argv.slice(2));
  const client = Client.fromTask(JSON.parse(readFileSync(args.get("task")!, "utf-8")));
  const value = Number(args.get("value"));
  const count = Number(args.get("count"));
  if (!Number.isInteger(count) || count < 1) throw new Error("--count must be a positive integer");
  const src = new CryptoSource(65536);
  const values: number[] = [];
  const seeds: string[] = [];
  const bits: string[] = [];
  const items: number[][] = [];
  for (let i = 0; i < count; i++) {
    const r = client.payload(value, src);
    if (r.value !== undefined) values.push(r.value);
    if (r.seed !== undefined) seeds.push(BigInt.asIntN(64, r.seed).toString());
    if (r.bits !== undefined) bits.push(toBase64(r.bits));
    if (r.items !== undefined) items.push(r.items);
  }
  const out: Record<string, unknown> = { params: client.params, count };
  if (values.length) out.value = values;
  if (seeds.length) out.seed = seeds;
  if (bits.length) out.bits = bits;
  if (items.length) out.items = items;
  writeFileSync(args.get("out")!, JSON.stringify(out));
}

try {
  main();
} catch (err) {
  process.stderr.write(`ldp-sample: ${(err as Error).message}\n`);
  process.exit(2);
}
