/** Posting to the collector: one idempotency key for every retry, backoff or Retry-After, final refusals. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { Client, CollectorError, type ReportJson, newIdempotencyKey, postReports } from "../src/index.js";

interface Sent {
  headers: Record<string, string>;
  body: string;
}

function fakeCollector(answers: Array<[number, unknown, Record<string, string>?] | Error>) {
  const sent: Sent[] = [];
  const fetch = async (_url: string, init: { method: string; headers: Record<string, string>; body: string }) => {
    sent.push({ headers: init.headers, body: init.body });
    const next = answers.shift();
    if (next === undefined) throw new Error("no more answers");
    if (next instanceof Error) throw next;
    const [status, body, headers] = next;
    return {
      status,
      headers: { get: (name: string) => (headers ?? {})[name] ?? null },
      text: async () => JSON.stringify(body),
    };
  };
  return { fetch, sent };
}

const reports: ReportJson[] = [Client.fromTask({ task_id: "t", mechanism: "grr", epsilon: 1, domain_size: 4 }).encode(1)];

test("a retry repeats the idempotency key, after the backoff or the collector's Retry-After", async () => {
  const { fetch, sent } = fakeCollector([
    new TypeError("connection reset"),
    [503, { error: "unavailable", detail: "disk full" }, { "Retry-After": "5" }],
    [200, { accepted: 1, duplicate: true }],
  ]);
  const waits: number[] = [];
  const answer = await postReports("http://c/v1/reports", reports, { fetch, sleep: async (ms) => void waits.push(ms), baseDelayMs: 100 });
  assert.deepEqual(answer, { accepted: 1, duplicate: true });
  assert.equal(sent.length, 3);
  const keys = new Set(sent.map((s) => s.headers["Idempotency-Key"]));
  assert.equal(keys.size, 1);
  assert.match([...keys][0], /^[0-9a-f]{32}$/);
  assert.ok(waits[0] >= 50 && waits[0] <= 100, `backoff ${waits[0]}`); // full jitter in [base/2, base]
  assert.equal(waits[1], 5000);
  assert.deepEqual(JSON.parse(sent[0].body), { reports });
});

test("a 4xx refusal is final; retries that run out throw the last answer", async () => {
  const refused = fakeCollector([[422, { error: "wrong_task", detail: "report 0: ..." }]]);
  await assert.rejects(postReports("u", reports, { fetch: refused.fetch, sleep: async () => {} }), (e: unknown) => {
    assert.ok(e instanceof CollectorError);
    assert.equal(e.status, 422);
    assert.equal(e.error, "wrong_task");
    return true;
  });
  assert.equal(refused.sent.length, 1);
  const down = fakeCollector([[503, { error: "unavailable", detail: "" }], [503, { error: "unavailable", detail: "" }]]);
  await assert.rejects(postReports("u", reports, { fetch: down.fetch, retries: 1, sleep: async () => {} }), /503/);
  const token = fakeCollector([[200, { accepted: 1 }]]);
  await postReports("u", reports, { fetch: token.fetch, token: "tok", idempotencyKey: "k-123456789" });
  assert.equal(token.sent[0].headers.Authorization, "Bearer tok");
  assert.equal(token.sent[0].headers["Idempotency-Key"], "k-123456789");
  assert.notEqual(newIdempotencyKey(), newIdempotencyKey());
});

test("a shuffled task's reports carry event times rounded down to time_precision_s", () => {
  const shuffled = Client.fromTask({
    task_id: "t", mechanism: "grr", epsilon: 1, domain_size: 4, anonymity: { shuffled: true, time_precision_s: 600 },
  });
  assert.equal(shuffled.encode(1, { eventTime: 1_767_225_912_345 }).event_time, 1_767_225_600_000);
  assert.equal(shuffled.encode(1).event_time % 600_000, 0);
  const hourly = Client.fromTask({ task_id: "t", mechanism: "grr", epsilon: 1, domain_size: 4, anonymity: {} });
  assert.equal(hourly.timePrecisionMs, 3_600_000);
  const plain = Client.fromTask({ task_id: "t", mechanism: "grr", epsilon: 1, domain_size: 4 });
  assert.equal(plain.encode(1, { eventTime: 1_767_225_912_345 }).event_time, 1_767_225_912_345);
});
