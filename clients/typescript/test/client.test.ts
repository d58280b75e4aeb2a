/** The client's own behaviour: WebCrypto randomness, the JSON form, refusals. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { ByteSource, Client, CryptoSource, bitLength, gf2Hash, gf2HashBig, threshold, toBase64, uniform } from "../src/index.js";

test("uniform rejects exactly: a word above the range is redrawn", () => {
  const bytes = new Uint8Array(16);
  bytes.fill(0xff, 0, 8); // 0xff..ff & 7 = 7 >= 6: redrawn
  bytes[8] = 5;
  const src = new ByteSource(bytes);
  assert.equal(uniform(src, 6), 5);
  assert.equal(src.consumed, 16);
  assert.equal(uniform(src, 1), 0); // m = 1 consumes nothing
  assert.equal(src.consumed, 16);
});

test("threshold is ceil(p * 2**53)", () => {
  assert.equal(threshold(0.5), 2 ** 52);
  assert.equal(bitLength(0), 0);
  assert.equal(bitLength(2 ** 53 - 1), 53);
  assert.throws(() => threshold(1));
});

test("base64 is standard and padded", () => {
  assert.equal(toBase64(new Uint8Array([])), "");
  assert.equal(toBase64(new Uint8Array([0xfb])), "+w==");
  assert.equal(toBase64(new Uint8Array([0xfb, 0xff])), "+/8=");
  assert.equal(toBase64(new Uint8Array([1, 2, 3])), "AQID");
});

test("WebCrypto reports are well formed JSON for every mechanism", () => {
  for (const mechanism of ["grr", "olh", "blh", "oue", "sue", "hr", "ss"]) {
    const client = Client.fromTask({ task_id: "t", mechanism, epsilon: 1, domain_size: 12 });
    for (let i = 0; i < 50; i++) {
      const r = client.encode(i % 12, { clientId: new Uint8Array(32).fill(7) });
      const back = JSON.parse(JSON.stringify(r));
      assert.deepEqual(back, r);
      assert.deepEqual(Object.keys(r), [
        "task_id", "schema_version", "event_time", "group", "value", "seed", "bits", "items", "reals", "client_id",
      ]);
      if (r.seed !== null) assert.match(r.seed, /^-?(0|[1-9][0-9]*)$/);
      if (r.bits !== null) assert.equal(r.bits.length, 4); // 2 bytes
      if (r.items !== null) assert.deepEqual([...r.items].sort((a, b) => a - b), r.items);
    }
  }
  assert.ok(new CryptoSource(8).nextWord().hi >= 0);
});

test("refusals: bad tasks and values", () => {
  assert.throws(() => Client.fromTask({ task_id: "t", mechanism: "auto", epsilon: 1, domain_size: 4 }), /resolve/);
  assert.throws(() => Client.fromTask({ task_id: "t", mechanism: "rappor", epsilon: 1, domain_size: 4 }), /not supported/);
  assert.throws(() => Client.fromTask({ task_id: "t", mechanism: "grr", epsilon: 1, domain_size: 4, schema_version: 1 }));
  assert.throws(() => Client.fromTask({ task_id: "t", mechanism: "olh", epsilon: 1, domain_size: 16, hash: { g: 3 } }), /power of two/);
  assert.throws(() => Client.fromTask({ task_id: "t", mechanism: "oue", epsilon: 100, domain_size: 4 }), /too large/);
  const c = Client.fromTask({ task_id: "t", mechanism: "grr", epsilon: 1, domain_size: 4 });
  assert.throws(() => c.encode(4), /value/);
  assert.throws(() => c.encode(1.5), /value/);
  assert.throws(() => c.encode(1, { seed: 1n }), /no seed/);
  const resolved = Client.fromTask({
    task_id: "t", mechanism: "auto", epsilon: 1, domain_size: 16,
    resolved: { auto_candidates: ["ss"], oracles: [{ mechanism: "ss", domain_size: 16, k: 4 }] },
  });
  assert.equal(resolved.params.k, 4);
});

test("the 32-bit gf2-affine hash equals the BigInt reference", () => {
  const src = new CryptoSource();
  for (const [m, k] of [[1, 1], [4, 2], [10, 3], [26, 1], [26, 26], [31, 31], [40, 5]]) {
    for (let i = 0; i < 300; i++) {
      const w = src.nextWord();
      const seed = (BigInt(w.hi) << 32n) | BigInt(w.lo);
      const value = uniform(src, 2 ** Math.min(m, 31));
      assert.equal(gf2Hash(seed, value, m, k), Number(gf2HashBig(seed, value, m, k)), `m ${m} k ${k}`);
    }
  }
});
