/** The memoized mechanisms: SHA-256 / HMAC against node:crypto, every memo vector of schemas/vectors/v1. */

import assert from "node:assert/strict";
import { createHash, createHmac, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import {
  ByteSource,
  MEMO_MECHANISMS,
  MemoClient,
  SECRET_STORAGE_KEY,
  type SecretStorage,
  fromHex,
  hmacSha256,
  instantaneous,
  loadOrCreateSecret,
  memoSpecFromTask,
  memoWireParams,
  sha256,
} from "../src/index.js";

const here = dirname(fileURLToPath(import.meta.url));
const VECTORS = process.env.LDP_VECTORS_DIR ?? resolve(here, "../../../../schemas/vectors/v1");

test("sha256 and hmacSha256 match node:crypto", () => {
  for (const n of [0, 1, 55, 56, 63, 64, 65, 119, 120, 200, 1000]) {
    const data = randomBytes(n);
    assert.equal(Buffer.from(sha256(data)).toString("hex"), createHash("sha256").update(data).digest("hex"));
    for (const kn of [16, 32, 64, 65, 100]) {
      const key = randomBytes(kn);
      const want = createHmac("sha256", key).update(data).digest("hex");
      assert.equal(Buffer.from(hmacSha256(key, data)).toString("hex"), want);
    }
  }
});

interface MemoVector {
  secret: string;
  value: number;
  memo_key: number;
  permanent: number | number[];
  seed_u64: string | null;
  hash: number | null;
  random: string;
  event_time: number;
  report: Record<string, unknown>;
}

for (const mechanism of MEMO_MECHANISMS) {
  test(`memo vectors: ${mechanism}`, () => {
    const doc = JSON.parse(readFileSync(resolve(VECTORS, `memo_${mechanism}.json`), "utf-8"));
    assert.equal(doc.vectors_version, 1);
    assert.ok(doc.cases.length >= 2);
    for (const c of doc.cases) {
      // the client reads the thresholds of the task's client parameters (here the vector's own): a
      // recomputed T_inst passes through exp(log(.)) and V8's Math.exp, which can put it one off
      const wire = c.params as Record<string, unknown>;
      const computed = memoWireParams(memoSpecFromTask(c.task)) as unknown as Record<string, unknown>;
      const got = MemoClient.fromTask(c.task, new Uint8Array(32), { wire }).params as unknown as Record<string, unknown>;
      assert.deepEqual(Object.keys(got).sort(), Object.keys(wire).sort());
      for (const [key, value] of Object.entries(wire)) {
        if (["p", "q", "perm_p", "perm_q", "inst_p"].includes(key)) {
          // reference doubles, unused by the procedure
          assert.ok(Math.abs((got[key] as number) - (value as number)) <= 2 ** -50, `${key}`);
        } else {
          assert.equal(got[key], value, `${c.task.task_id}: ${key}`);
          if (!key.startsWith("T_")) assert.equal(computed[key], value, `${c.task.task_id}: ${key}`);
        }
      }
      for (const v of c.vectors as MemoVector[]) {
        const client = MemoClient.fromTask(c.task, fromHex(v.secret), { wire });
        const perm = client.permanent(v.value);
        assert.equal(perm.memoKey, v.memo_key);
        assert.deepEqual(perm.memo, v.permanent);
        assert.equal(perm.seed === undefined ? null : perm.seed.toString(), v.seed_u64);
        assert.equal(perm.hash ?? null, v.hash);
        const src = ByteSource.fromHex(v.random);
        assert.deepEqual(client.encode(v.value, { random: src, eventTime: v.event_time }), v.report);
        assert.equal(src.consumed, v.random.length / 2, "every random byte consumed");
        if (v.random.length >= 16) {
          const short = ByteSource.fromHex(v.random.slice(0, -16));
          assert.throws(() => client.encode(v.value, { random: short, eventTime: v.event_time }), /exhausted/);
        }
      }
    }
  });
}

test("the secret lives in the caller's storage, drawn once", () => {
  const map = new Map<string, string>();
  const storage: SecretStorage = { getItem: (k) => map.get(k) ?? null, setItem: (k, v) => void map.set(k, v) };
  const a = loadOrCreateSecret(storage);
  assert.equal(a.length, 32);
  assert.deepEqual(loadOrCreateSecret(storage), a);
  assert.match(map.get(SECRET_STORAGE_KEY)!, /^[0-9a-f]{64}$/);
  map.set(SECRET_STORAGE_KEY, "abcd");
  assert.throws(() => loadOrCreateSecret(storage), /32 bytes/);
});

test("memoized tasks refuse bad parameters and memos", () => {
  const task = { task_id: "t", mechanism: "memo-grr", epsilon: 1, domain_size: 4 };
  assert.throws(() => memoSpecFromTask({ ...task, mechanism: "grr" }), /not memoized/);
  assert.throws(() => memoWireParams(memoSpecFromTask({ ...task, params: { epsilon_1: 2 } })), /epsilon_1/);
  assert.throws(() => memoSpecFromTask({ ...task, params: { k: 2 } }), /unknown params/);
  assert.throws(() => MemoClient.fromTask(task, new Uint8Array(8)), /16 bytes/);
  const params = memoWireParams(memoSpecFromTask(task));
  assert.throws(() => instantaneous(params, 4, ByteSource.fromHex("00".repeat(16))), /\[0, 4\)/);
});
