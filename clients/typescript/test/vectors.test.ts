/** Every encode vector of schemas/vectors/v1 (docs/wire_format.md), reproduced byte for byte. */

import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { ByteSource, Client, MECHANISMS, gf2Hash, wireParams, specFromTask } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const VECTORS = process.env.LDP_VECTORS_DIR ?? resolve(here, "../../../../schemas/vectors/v1");

interface Vector {
  value: number;
  seed_u64: string | null;
  hash: number | null;
  random: string;
  event_time: number;
  report: Record<string, unknown>;
}

interface Case {
  task: Record<string, unknown>;
  params: Record<string, unknown>;
  vectors: Vector[];
}

function load(name: string): { vectors_version: number; schema_version: number; cases: Case[] } {
  return JSON.parse(readFileSync(resolve(VECTORS, name), "utf-8"));
}

test("every frequency oracle has an encode vector file", () => {
  // encode_numeric_*.json, encode_sparse_*.json: numeric and sparse-vector mechanisms, which this client
  // does not implement yet; encode_pem.json: heavy hitters (heavy_hitters.test.ts)
  const files = readdirSync(VECTORS).filter(
    (f) =>
      f.startsWith("encode_") &&
      !f.startsWith("encode_numeric_") &&
      !f.startsWith("encode_sparse_") &&
      f !== "encode_pem.json",
  );
  assert.deepEqual(files.sort(), MECHANISMS.map((m) => `encode_${m}.json`).sort());
});

for (const mechanism of MECHANISMS) {
  test(`encode vectors: ${mechanism}`, () => {
    const doc = load(`encode_${mechanism}.json`);
    assert.equal(doc.vectors_version, 1);
    assert.equal(doc.schema_version, 2);
    assert.ok(doc.cases.length >= 2);
    for (const c of doc.cases) {
      // the client reads the thresholds of the task's client parameters (here the vector's own)
      const client = Client.fromTask(c.task, { wire: c.params });
      const want = c.params;
      const got = client.params as unknown as Record<string, unknown>;
      assert.deepEqual(Object.keys(got).sort(), Object.keys(want).sort());
      for (const [key, value] of Object.entries(want)) {
        if (key === "p" || key === "q") {
          // reference doubles, unused by the procedure: Math.exp is not correctly rounded in V8
          assert.ok(Math.abs((got[key] as number) - (value as number)) <= 2 ** -50, `${key}`);
        } else {
          assert.equal(got[key], value, `${c.task.task_id}: ${key}`);
        }
      }
      for (const v of c.vectors) {
        const src = ByteSource.fromHex(v.random);
        const seed = v.seed_u64 === null ? undefined : BigInt(v.seed_u64);
        if (seed !== undefined) {
          assert.equal(gf2Hash(seed, v.value, got.m as number, got.k as number), v.hash);
        }
        const report = client.encode(v.value, { random: src, seed, eventTime: v.event_time });
        assert.deepEqual(report, v.report, `${c.task.task_id} value ${v.value}`);
        assert.equal(src.consumed, v.random.length / 2, "every random byte consumed");
        if (v.random.length >= 16) {
          const short = ByteSource.fromHex(v.random.slice(0, -16));
          assert.throws(() => client.encode(v.value, { random: short, seed, eventTime: v.event_time }), /exhausted/);
        }
      }
    }
  });
}

test("client parameters of another task are refused", () => {
  const task = { task_id: "t", mechanism: "grr", epsilon: 1.0, domain_size: 4 };
  const own = wireParams(specFromTask(task)) as unknown as Record<string, unknown>;
  assert.throws(() => Client.fromTask(task, { wire: { task_id: "other", params: own } }), /for task "other"/);
  assert.throws(() => Client.fromTask(task, { wire: { ...own, d: 5 } }), /d = 5/);
  assert.throws(() => Client.fromTask(task, { wire: { ...own, T_p: (own.T_p as number) + 2 } }), /not this task's/);
  assert.throws(() => Client.fromTask(task, { wire: { ...own, T_p: 0.5 } }), /integer/);
  const { T_p: _, ...noT } = own;
  assert.throws(() => Client.fromTask(task, { wire: noT }), /lack T_p/);
  const off = Client.fromTask(task, { wire: { task_id: "t", params: { ...own, T_p: (own.T_p as number) + 1 } } });
  assert.equal(off.params.T_p, (own.T_p as number) + 1); // the file's threshold is the one used
});
