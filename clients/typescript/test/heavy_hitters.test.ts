/** Heavy hitters (PEM, docs/wire_format.md section 10): encode_pem.json reproduced byte for byte. */

import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { ByteSource, HH_MECHANISMS, PemClient, pemHash, publishedLevel, valueBits } from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const VECTORS = process.env.LDP_VECTORS_DIR ?? resolve(here, "../../../../schemas/vectors/v1");

interface Vector {
  value_hex: string;
  value_text: string | null;
  seed_u64: string;
  level: number;
  hash: number;
  random: string;
  event_time: number;
  report: Record<string, unknown>;
}

interface Case {
  task: Record<string, unknown>;
  params: Record<string, unknown>;
  vectors: Vector[];
  refused_inputs: { value_hex: string; value_text: string | null }[];
}

const doc = JSON.parse(readFileSync(resolve(VECTORS, "encode_pem.json"), "utf-8")) as {
  vectors_version: number;
  schema_version: number;
  cases: Case[];
};

function hex(s: string): Uint8Array {
  return Uint8Array.from(s.match(/../g) ?? [], (b) => parseInt(b, 16));
}

test("every heavy-hitters mechanism has an encode vector file", () => {
  const files = readdirSync(VECTORS).filter((f) => HH_MECHANISMS.some((m) => f === `encode_${m}.json`));
  assert.deepEqual(files, HH_MECHANISMS.map((m) => `encode_${m}.json`));
  assert.equal(doc.vectors_version, 1);
  assert.equal(doc.schema_version, 2);
  assert.ok(doc.cases.length >= 4);
});

for (const c of doc.cases) {
  test(`encode vectors: pem ${String(c.task.task_id)}`, () => {
    const client = PemClient.fromTask(c.task, { wire: { task_id: c.task.task_id, params: c.params } });
    const levels = new Set<number>();
    for (const v of c.vectors) {
      const seed = BigInt(v.seed_u64);
      const inputs: (string | Uint8Array)[] = [hex(v.value_hex)];
      if (v.value_text !== null) inputs.push(v.value_text); // a string encodes as its UTF-8 bytes
      for (const input of inputs) {
        const lv = client.params.levels[v.level];
        assert.equal(pemHash(lv, seed, valueBits(input, client.params.max_length), client.params.total_bits), v.hash);
        const src = ByteSource.fromHex(v.random);
        const out = client.output(input, ByteSource.fromHex(v.random), seed);
        assert.deepEqual([out.level, out.hash], [v.level, v.hash]);
        const report = client.encode(input, { random: src, seed, eventTime: v.event_time });
        assert.deepEqual(report, v.report, `${String(c.task.task_id)} value ${v.value_hex}`);
        assert.equal(src.consumed, v.random.length / 2, "every random byte consumed");
        const short = ByteSource.fromHex(v.random.slice(0, -16));
        assert.throws(() => client.encode(input, { random: short, seed, eventTime: v.event_time }), /exhausted/);
      }
      levels.add(v.level);
    }
    assert.equal(levels.size, client.params.levels.length, "every level has vectors");
    for (const bad of c.refused_inputs) {
      const src = ByteSource.fromHex("00".repeat(64));
      assert.throws(() => client.encode(hex(bad.value_hex), { random: src, seed: 1n }), /more than max_length/);
      if (bad.value_text !== null) {
        assert.throws(() => client.encode(bad.value_text as string, { random: src, seed: 1n }), /more than max_length/);
      }
    }
  });
}

test("heavy-hitters tasks and client parameters that do not fit are refused", () => {
  const c = doc.cases[0];
  const wire = { task_id: c.task.task_id, params: c.params };
  assert.throws(() => PemClient.fromTask(c.task), /client parameters/);
  assert.throws(() => PemClient.fromTask({ ...c.task, task_id: "other" }, { wire }), /for task "wire-pem-0"/);
  assert.throws(() => PemClient.fromTask({ ...c.task, max_length: 7 }, { wire }), /max_length/);
  assert.throws(() => PemClient.fromTask({ ...c.task, epsilon: 3 }, { wire }), /epsilon/);
  assert.throws(() => PemClient.fromTask({ ...c.task, kind: "frequency" }, { wire }), /heavy_hitters/);
  assert.throws(() => PemClient.fromTask({ ...c.task, params: { search: "olh" } }, { wire }), /olh/);
  const levels = c.params.levels as Record<string, unknown>[];
  const badT = { ...c.params, levels: [{ ...levels[0], T_p: 0.5 }, ...levels.slice(1)] };
  assert.throws(() => PemClient.fromTask(c.task, { wire: badT }), /T_p/);
  const badOrder = { ...c.params, T_level: [...(c.params.T_level as number[])].reverse() };
  assert.throws(() => PemClient.fromTask(c.task, { wire: badOrder }), /T_level/);
  const client = PemClient.fromTask(c.task, { wire });
  assert.throws(() => client.encode("\ud800", { random: ByteSource.fromHex("00".repeat(64)), seed: 1n }), /surrogate/);
});

test("truncate cuts a long string at a UTF-8 character boundary", () => {
  const c = doc.cases[0]; // max_length 6
  const client = PemClient.fromTask({ ...c.task, truncate: true }, { wire: { task_id: c.task.task_id, params: c.params } });
  // "abcde" + a 2-byte character: 7 bytes, cut to "abcde" (the character is not split)
  assert.equal(valueBits("abcde\u00e9", 6, true), valueBits("abcde", 6));
  assert.equal(valueBits(Uint8Array.of(1, 2, 3, 4, 5, 6, 7), 6, true), valueBits(Uint8Array.of(1, 2, 3, 4, 5, 6), 6));
  const r = client.encode("abcdefgh", { random: ByteSource.fromHex("00".repeat(64)), seed: 5n, eventTime: 0 });
  assert.equal(r.task_id, c.task.task_id);
});

test("WebCrypto reports: levels in range, outputs in [0, g), seeds differ", () => {
  const c = doc.cases[0];
  const client = PemClient.fromTask(c.task, { wire: { task_id: c.task.task_id, params: c.params } });
  const seeds = new Set<string>();
  const counts = new Array<number>(client.params.levels.length).fill(0);
  for (let i = 0; i < 2000; i++) {
    const r = client.encode("hello", { eventTime: 1767225600000 });
    const lv = client.params.levels[r.group];
    assert.ok(r.value !== null && r.value >= 0 && r.value < lv.g);
    seeds.add(r.seed as string);
    counts[r.group]++;
  }
  assert.equal(seeds.size, 2000);
  const w = client.params.weights;
  counts.forEach((n, j) => assert.ok(Math.abs(n / 2000 - w[j]) < 0.06, `level ${j}: ${n} of 2000`));
});

test("trie mode: every report at the published level, the level draw skipped, the rest of the procedure unchanged", () => {
  const c = doc.cases[0];
  const wire = { task_id: c.task.task_id, params: c.params };
  const trie = PemClient.fromTask({ ...c.task, mode: "trie" }, { wire });
  assert.equal(trie.mode, "trie");
  for (const v of c.vectors) {
    // the vector's words without its first (the level draw): the same report at the same level
    const src = ByteSource.fromHex(v.random.slice(16));
    const report = trie.encode(hex(v.value_hex), { random: src, seed: BigInt(v.seed_u64), eventTime: v.event_time, level: v.level });
    assert.deepEqual(report, v.report);
    assert.equal(src.consumed, v.random.length / 2 - 8);
  }
  for (let i = 0; i < 50; i++) assert.equal(trie.encode("hello", { eventTime: 0 }).group, 0); // nothing published: level 0
  const last = trie.params.levels.length - 1;
  assert.equal(trie.encode("hello", { eventTime: 0, level: last }).group, last);
  assert.throws(() => trie.encode("hello", { eventTime: 0, level: last + 1 }), /level must be an integer/);
  const oneWindow = PemClient.fromTask(c.task, { wire });
  assert.throws(() => oneWindow.encode("hello", { eventTime: 0, level: 0 }), /not in trie mode/);
  assert.throws(() => PemClient.fromTask({ ...c.task, mode: "tree" }, { wire }), /one_window or trie/);
});

test("publishedLevel reads the level of the task's newest publication, 0 before one", () => {
  const c = doc.cases[0];
  const trie = PemClient.fromTask({ ...c.task, mode: "trie" }, { wire: { task_id: c.task.task_id, params: c.params } });
  assert.equal(publishedLevel(null, trie), 0);
  assert.equal(publishedLevel({ task_id: c.task.task_id, generation: 3, level: 1, window_end: 0 }, trie), 1);
  assert.throws(() => publishedLevel({ task_id: "other", generation: 1, level: 1 }, trie), /publication of task "other"/);
  assert.throws(() => publishedLevel({ task_id: c.task.task_id, generation: 1, level: 99 }, trie), /level must be an integer/);
  assert.throws(() => publishedLevel([1], trie), /JSON object/);
});
