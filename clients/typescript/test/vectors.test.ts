/** Every encode vector of schemas/vectors/v1 (docs/wire_format.md), reproduced byte for byte. */

import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { ByteSource, Client, MECHANISMS, gf2Hash } from "../src/index.js";

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
  // encode_numeric_*.json: the numeric mechanisms, which this client does not implement yet
  const files = readdirSync(VECTORS).filter((f) => f.startsWith("encode_") && !f.startsWith("encode_numeric_"));
  assert.deepEqual(files.sort(), MECHANISMS.map((m) => `encode_${m}.json`).sort());
});

for (const mechanism of MECHANISMS) {
  test(`encode vectors: ${mechanism}`, () => {
    const doc = load(`encode_${mechanism}.json`);
    assert.equal(doc.vectors_version, 1);
    assert.equal(doc.schema_version, 2);
    assert.ok(doc.cases.length >= 2);
    for (const c of doc.cases) {
      const client = Client.fromTask(c.task);
      const want = c.params;
      const got = client.params as unknown as Record<string, unknown>;
      assert.deepEqual(Object.keys(got).sort(), Object.keys(want).sort());
      for (const [key, value] of Object.entries(want)) {
        if (key === "p" || key === "q") {
          // float probabilities may differ in the last bits where Math.exp is not correctly rounded
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
