#!/usr/bin/env node
/**
 * ldp-sample: reports of one value drawn with WebCrypto randomness, for audits of this client's output.
 *
 *   node dist/src/cli.js --task TASK.json --value V --count N --out OUT.json
 *
 * OUT.json holds the wire parameters and the payload columns: `value` (integers), `seed` (decimal strings,
 * signed as in the JSON form), `bits` (base64) and `items` (integer arrays), each present when the
 * mechanism sets it.
 *
 * Memoized tasks (memo-grr, rappor, memo-olh, loloha) also take `--secret HEX` (one user: its fixed
 * permanent response, fresh instantaneous noise per report) or `--secret fresh` (a new WebCrypto secret per
 * report: the one-report distribution of fresh users), or `--memo M` (the instantaneous step alone on the
 * memo `M`: an integer, or rappor's bits as a 0/1 string).
 *
 * `--wire FILE`: the task's client parameters (`python -m wire.client TASK.json`), whose thresholds the
 * client then uses.
 *
 * Heavy-hitters tasks (`"kind": "heavy_hitters"`, `--wire` required): `--value` is the string itself; OUT.json
 * also holds `group` (each report's level).
 */

import { readFileSync, writeFileSync } from "node:fs";

import { toBase64 } from "./base64.js";
import { Client } from "./client.js";
import { PemClient } from "./heavy_hitters.js";
import { MEMO_MECHANISMS, MemoClient, fromHex, instantaneous, memoSpecFromTask, memoWireParams, newSecret } from "./memo.js";
import { applyWire } from "./wire.js";
import type { Payload } from "./oracles.js";
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

/** Heavy-hitters reports of one string: `group`, `value` and `seed` columns. */
function pemSample(task: unknown, wire: unknown, value: string, count: number): Record<string, unknown> {
  const client = PemClient.fromTask(task, { wire });
  const src = new CryptoSource(65536);
  const groups: number[] = [];
  const values: number[] = [];
  const seeds: string[] = [];
  for (let i = 0; i < count; i++) {
    const r = client.output(value, src);
    groups.push(r.level);
    values.push(r.value);
    seeds.push(BigInt.asIntN(64, r.seed).toString());
  }
  return { params: client.params, count, group: groups, value: values, seed: seeds };
}

function main(): void {
  const args = parseArgs(process.argv.slice(2));
  const task = JSON.parse(readFileSync(args.get("task")!, "utf-8"));
  const value = Number(args.get("value"));
  const count = Number(args.get("count"));
  if (!Number.isInteger(count) || count < 1) throw new Error("--count must be a positive integer");
  const wireFile = args.get("wire");
  const wire = wireFile === undefined ? undefined : JSON.parse(readFileSync(wireFile, "utf-8"));
  if (task !== null && typeof task === "object" && task.kind === "heavy_hitters") {
    writeFileSync(args.get("out")!, JSON.stringify(pemSample(task, wire, args.get("value")!, count)));
    return;
  }
  const src = new CryptoSource(65536);
  let client: { params: object; payload(value: number, src: CryptoSource): Payload };
  if ((MEMO_MECHANISMS as readonly string[]).includes(task.mechanism)) {
    const params = applyWire(memoWireParams(memoSpecFromTask(task)), wire, task.task_id);
    const memoArg = args.get("memo");
    const secretArg = args.get("secret");
    if (memoArg !== undefined) {
      const memo = params.mechanism === "rappor" ? [...memoArg].map(Number) : Number(memoArg);
      client = {
        params,
        payload: (_v, s) => {
          const y = instantaneous(params, memo, s);
          return y instanceof Uint8Array ? { bits: y } : { value: y };
        },
      };
    } else if (secretArg === "fresh") {
      client = { params, payload: (v, s) => MemoClient.fromTask(task, newSecret(), { wire }).payload(v, s) };
    } else if (secretArg !== undefined) {
      const user = MemoClient.fromTask(task, fromHex(secretArg), { wire });
      client = { params, payload: (v, s) => user.payload(v, s) };
    } else {
      throw new Error("a memoized task needs --secret HEX, --secret fresh or --memo M");
    }
  } else {
    client = Client.fromTask(task, { wire });
  }
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
